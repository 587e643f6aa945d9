//! The simulated node: a description of a machine (GPUs, links, PCIe, virtualization, health and
//! the bandwidth each path delivers) from which every measurement is computed with seeded,
//! bounded noise. Same description, same seed, same numbers. Faults can be injected to prove that
//! each check catches what it exists to catch. Nothing produced here is ever a measurement of
//! real hardware, and the evidence says so.

use super::*;
use crate::config::{self, Source};
use crate::error::InputError;
use crate::inventory::*;
use crate::suite::{CollectiveOp, GemmPrecision, PciePath};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

mod fault;
mod node;
mod train;

pub use fault::*;
pub use node::*;

/// The share of its GEMM rate a GPU in hardware thermal slowdown keeps in the simulation (our
/// estimate: the slowdown lowers SM clocks by about a third).
pub const THERMAL_SLOWDOWN_FACTOR: f64 = 0.7;

/// Fixed cost of one simulated GEMM, microseconds (launch and the last wave's tail): what
/// keeps small GEMMs below the plateau.
pub const GEMM_OVERHEAD_US: f64 = 8.0;

/// The simulated backend: a node description, faults and a seed.
pub struct SimBackend {
    node: SimNode,
    faults: Vec<Fault>,
    seed: u64,
    /// GPUs after `gpu-missing` and `gpu-lost` faults: original indices of the GPUs that remain.
    present: Vec<usize>,
    /// How many times each measurement was taken: a transient fault (`attempts=N`) shows only
    /// on the first N.
    taken: std::collections::HashMap<String, u32>,
    /// Measurements of the same thing taken before the one in progress.
    nth: u32,
    /// The name given to this node of a simulated fleet (`--node-name`): its host name, and
    /// what its GPUs' serials and UUIDs derive from, so that no two nodes share a GPU.
    named: Option<String>,
    /// The NCCL settings this node answers as in effect ([`SimBackend::with_nccl_env`]).
    nccl_env: Vec<crate::backend::NcclSetting>,
    /// The XIDs of xid-under-load faults were told ([`Backend::xids_since`]): once, as a real
    /// node tells each event once.
    xids_told: bool,
}

/// Another VBIOS version than `v`, for the vbios-mismatch fault: its last field changed
/// ("96.00.9F.00.05" becomes "96.00.9F.00.06"), as a GPU flashed at another time would show.
fn other_vbios(v: &str) -> String {
    match v.rsplit_once('.') {
        Some((head, last)) => {
            let next = u32::from_str_radix(last, 16).map_or(1, |n| n.wrapping_add(1) & 0xff);
            format!("{head}.{next:02X}")
        }
        None => format!("{v}.1"),
    }
}

impl SimBackend {
    pub fn new(node: SimNode, extra_faults: Vec<Fault>, seed: u64) -> Result<Self, InputError> {
        let n = node.gpu.count;
        let mut faults = node.faults.clone();
        for f in extra_faults {
            check_fault(&f, n, node.network.as_ref().map(|x| x.nics))
                .map_err(|m| InputError::Other(format!("--inject {}: {m}", f.label())))?;
            faults.push(f);
        }
        let missing: Vec<usize> = faults
            .iter()
            .filter(|f| matches!(f.kind, FaultKind::GpuMissing | FaultKind::GpuLost))
            .map(|f| f.gpu.unwrap_or(n - 1))
            .collect();
        let present: Vec<usize> = (0..n).filter(|i| !missing.contains(i)).collect();
        Ok(SimBackend {
            node,
            faults,
            seed,
            present,
            taken: Default::default(),
            nth: 0,
            named: None,
            nccl_env: Vec::new(),
            xids_told: false,
        })
    }

    /// Name this simulated node (one of a fleet): the host name becomes `name`, and its GPUs'
    /// serials and UUIDs derive from it instead of from the node description's name.
    pub fn named(mut self, name: &str) -> Self {
        self.node.hostname = name.to_string();
        self.named = Some(name.to_string());
        self
    }

    /// Answer `env` as the NCCL settings in effect, sorted as the real backend answers them
    /// (tests of what a setting does to a verdict; the simulated figures do not change with it).
    pub fn with_nccl_env(mut self, env: &[(&str, &str)]) -> Self {
        self.nccl_env = env
            .iter()
            .map(|(k, v)| crate::backend::NcclSetting::env(k, v))
            .collect();
        self.nccl_env.sort();
        self
    }

    /// What a simulated run records of its node: enough to run it again.
    pub fn record(&self) -> crate::evidence::SimulationRecord {
        crate::evidence::SimulationRecord {
            node: self.node.name.clone(),
            seed: self.seed,
            faults: self.faults.iter().map(Fault::label).collect(),
            node_name: self.named.clone(),
        }
    }

    pub fn node(&self) -> &SimNode {
        &self.node
    }

    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// The faults of a kind that show on the measurement in progress.
    fn faults_of(&self, kind: FaultKind) -> impl Iterator<Item = &Fault> {
        let nth = self.nth;
        self.faults
            .iter()
            .filter(move |f| f.kind == kind && f.attempts.is_none_or(|k| nth < k))
    }

    /// Start measuring `what`: count it, so that transient faults show on its first
    /// measurements only, and name its samples (a repeat measurement gets its own noise).
    fn begin(&mut self, what: String) -> String {
        let n = self.taken.entry(what.clone()).or_insert(0);
        self.nth = *n;
        *n += 1;
        if self.nth == 0 {
            what
        } else {
            format!("{what} #{}", self.nth)
        }
    }

    /// Original index of the GPU at CUDA ordinal `i`.
    fn orig(&self, i: usize) -> usize {
        self.present[i]
    }

    /// The node's NICs, before the run or after it (`after`: the counters of `nic-errors` risen).
    fn sim_fabric(&self, gpus: &[Gpu], after: bool) -> Option<crate::network::Fabric> {
        let net = self.node.network.as_ref()?;
        let faults: Vec<&Fault> = self.faults.iter().collect();
        Some(super::sim_nic::fabric(
            &self.node,
            net,
            &faults,
            gpus,
            &self.present,
            after,
        ))
    }

    fn bus_id(&self, orig: usize) -> String {
        self.node.bus_id(orig)
    }

    /// A deterministic generator for one measurement: depends on the seed and what is measured,
    /// not on the order measurements are taken in.
    fn rng(&self, what: &str) -> ChaCha8Rng {
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(what.as_bytes());
        let d = h.finalize();
        let mut s = [0u8; 32];
        s.copy_from_slice(&d);
        ChaCha8Rng::from_seed(s)
    }

    /// `iters` samples around `mean`, relative noise bounded at 3 sigma.
    fn samples(&self, what: &str, mean: f64, iters: u32) -> Vec<f64> {
        let mut rng = self.rng(what);
        let sd = self.node.perf.noise_pct / 100.0;
        (0..iters.clamp(1, 200))
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut rng);
                mean * (1.0 + sd * z.clamp(-3.0, 3.0))
            })
            .collect()
    }

    /// Active NVLinks each original GPU has (after nvlink-down faults on switched systems).
    fn gpu_links(&self, orig: usize) -> u32 {
        let down = self
            .faults_of(FaultKind::NvlinkDown)
            .filter(|f| self.node.links.nvswitch && self.orig(f.gpu.unwrap_or(0)) == orig)
            .count() as u32;
        self.node.links.nvlinks_per_gpu.saturating_sub(down)
    }

    /// Active NVLinks between two CUDA ordinals.
    fn pair_links(&self, a: usize, b: usize) -> u32 {
        if self.node.links.nvswitch {
            return self
                .gpu_links(self.orig(a))
                .min(self.gpu_links(self.orig(b)));
        }
        let down = self
            .faults_of(FaultKind::NvlinkDown)
            .filter(|f| {
                let g = f.gpu.unwrap_or(0);
                let p = f.peer.unwrap_or(g + 1);
                (g, p) == (a, b) || (g, p) == (b, a)
            })
            .count() as u32;
        self.pair_links_nominal(a, b).saturating_sub(down)
    }

    /// Full NVLink count a pair would have without faults.
    fn pair_links_nominal(&self, a: usize, b: usize) -> u32 {
        if self.node.links.nvswitch {
            return self.node.links.nvlinks_per_gpu;
        }
        let (oa, ob) = (self.orig(a) as u32, self.orig(b) as u32);
        self.node
            .links
            .direct
            .iter()
            .find(|d| (d[0], d[1]) == (oa, ob) || (d[0], d[1]) == (ob, oa))
            .map(|d| d[2])
            .unwrap_or(0)
    }

    fn p2p_enabled(&self, a: usize, b: usize) -> bool {
        if !self.node.links.p2p {
            return false;
        }
        !self.faults_of(FaultKind::P2pDisabled).any(|f| match f.gpu {
            None => true,
            Some(g) => {
                let p = f.peer;
                (a == g && p.is_none_or(|p| p == b)) || (b == g && p.is_none_or(|p| p == a))
            }
        })
    }

    fn pcie_of(&self, i: usize) -> (u32, u32) {
        let mut gen = self.node.gpu.pcie_gen;
        let mut width = self.node.gpu.pcie_width;
        for f in self.faults_of(FaultKind::PcieDowntrained) {
            if f.gpu.unwrap_or(0) == i {
                if f.gen.is_none() && f.width.is_none() {
                    width /= 2;
                }
                gen = f.gen.unwrap_or(gen);
                width = f.width.unwrap_or(width);
            }
        }
        (gen, width)
    }

    /// Host bandwidth multiplier for GPU i: PCIe training and slow-host faults.
    fn host_factor(&self, i: usize) -> f64 {
        let (gen, width) = self.pcie_of(i);
        let per_lane = |g: u32| 2f64.powi(g as i32 - 1);
        let mut f = (per_lane(gen) * width as f64)
            / (per_lane(self.node.gpu.pcie_gen) * self.node.gpu.pcie_width as f64);
        for x in self.faults_of(FaultKind::SlowHostBandwidth) {
            if x.gpu.unwrap_or(0) == i {
                f *= x.factor.unwrap_or(0.6);
            }
        }
        f.min(1.0)
    }

    /// Peer bandwidth multiplier for a pair; `transients`: with the faults that show only on
    /// the pair's first copies (a collective does not see them).
    fn pair_factor(&self, a: usize, b: usize, transients: bool) -> f64 {
        let mut f = 1.0;
        for x in self
            .faults_of(FaultKind::SlowGpuPair)
            .filter(|x| transients || x.attempts.is_none())
        {
            let g = x.gpu.unwrap_or(0);
            let p = x.peer.unwrap_or(g + 1);
            if (g, p) == (a, b) || (g, p) == (b, a) {
                f *= x.factor.unwrap_or(0.6);
            }
        }
        f
    }

    /// One-way and both-way peer bandwidth of a pair, before noise.
    fn pair_gbps(&self, a: usize, b: usize, transients: bool) -> (f64, f64) {
        let p = &self.node.perf;
        if !self.p2p_enabled(a, b) {
            return (p.staged_gbps, p.staged_gbps * 1.4);
        }
        let links = self.pair_links(a, b);
        let nominal = self.pair_links_nominal(a, b);
        let (one, both) = if links > 0 && nominal > 0 {
            let r = links as f64 / nominal as f64;
            (p.p2p_nvlink_gbps * r, p.p2p_nvlink_bidir_gbps * r)
        } else {
            self.pcie_pair_gbps(a, b)
        };
        let f = self.pair_factor(a, b, transients);
        (one * f, both * f)
    }

    /// The PCIe path class of a pair of CUDA ordinals, when its label is one.
    fn pcie_class(&self, a: usize, b: usize) -> Option<PciePath> {
        PciePath::parse(&self.node.pcie_label(self.orig(a), self.orig(b)))
    }

    /// One-way and both-way peer bandwidth of a healthy pair over PCIe: its path class's
    /// figures, else the node's single ones.
    fn pcie_pair_gbps(&self, a: usize, b: usize) -> (f64, f64) {
        let p = &self.node.perf;
        let class = self.pcie_class(a, b);
        let of = |m: &BTreeMap<PciePath, f64>, default: f64| {
            class.and_then(|c| m.get(&c).copied()).unwrap_or(default)
        };
        (
            of(&p.p2p_pcie_gbps_by_path, p.p2p_pcie_gbps),
            of(&p.p2p_pcie_bidir_gbps_by_path, p.p2p_pcie_bidir_gbps),
        )
    }

    /// One-way peer bandwidth a healthy pair delivers (no faults), the yardstick for collectives.
    fn pair_gbps_nominal(&self, a: usize, b: usize) -> f64 {
        if self.pair_links_nominal(a, b) > 0 {
            self.node.perf.p2p_nvlink_gbps
        } else {
            self.pcie_pair_gbps(a, b).0
        }
    }

    fn n(&self) -> usize {
        self.present.len()
    }

    /// corrupt-copy without a peer: GPU i's host and device copies return wrong data.
    fn host_copy_corrupt(&self, i: usize) -> bool {
        self.faults_of(FaultKind::CorruptCopy)
            .any(|f| f.peer.is_none() && f.gpu.unwrap_or(0) == i)
    }

    /// corrupt-copy with a peer: copies between the pair, either way, return wrong data.
    fn pair_copy_corrupt(&self, a: usize, b: usize) -> bool {
        self.faults_of(FaultKind::CorruptCopy).any(|f| {
            let g = f.gpu.unwrap_or(0);
            f.peer.is_some_and(|p| (g, p) == (a, b) || (g, p) == (b, a))
        })
    }

    /// The readings GPU `orig` (the node's numbering) does not give.
    fn hidden(&self, orig: usize) -> Vec<Reading> {
        let mut out: Vec<Reading> = self
            .node
            .unavailable
            .iter()
            .filter(|u| u.gpus.is_empty() || u.gpus.contains(&orig))
            .flat_map(|u| u.readings.iter().copied())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn hides_driver_version(&self) -> bool {
        self.node
            .unavailable
            .iter()
            .any(|u| u.readings.contains(&Reading::DriverVersion))
    }

    fn check_gpu(&self, i: usize) -> Result<(), HwError> {
        if i >= self.n() {
            return Err(HwError::Call {
                call: "simulated device lookup".into(),
                detail: format!("GPU {i} does not exist (the node has {})", self.n()),
            });
        }
        Ok(())
    }

    /// [`SimBackend::coll_peak_over`] every GPU.
    #[cfg(test)]
    fn coll_peak(&self, op: CollectiveOp, no_nvls: bool) -> f64 {
        let all: Vec<usize> = (0..self.n()).collect();
        self.coll_peak_over(op, no_nvls, &all)
    }

    /// Bus bandwidth of a collective at large sizes among the GPUs `ranks` (CUDA ordinals;
    /// every GPU for the collectives check) after faults, as NCCL chooses its algorithm, or
    /// with NVLS forced off (`no_nvls`, `NCCL_NVLS_ENABLE=0`), GB/s: the node's healthy figure times the worst share of its healthy figure that a pair among them now
    /// delivers. A group's collectives ride its own links: a slow pair slows every group that
    /// holds both its GPUs, and no other.
    fn coll_peak_over(&self, op: CollectiveOp, no_nvls: bool, ranks: &[usize]) -> f64 {
        let p = &self.node.perf;
        let mut peak = p.collective_busbw_gbps.get(&op).copied().unwrap_or(0.0);
        // NCCL uses NVLS only when every GPU can: one without it and all_reduce falls back.
        let nvls_lost =
            self.node.links.nvls && self.faults_of(FaultKind::NvlsUnavailable).next().is_some();
        if op == CollectiveOp::AllReduce && (nvls_lost || (no_nvls && self.node.links.nvls)) {
            peak = p.collective_busbw_no_nvls_gbps.unwrap_or(peak);
        }
        // Collectives ride the slowest path between GPUs: the figure a healthy node delivers,
        // times the worst share of its healthy figure that any pair now delivers.
        if ranks.len() > 1 {
            let mut share = f64::INFINITY;
            for (i, &a) in ranks.iter().enumerate() {
                for &b in &ranks[i + 1..] {
                    let nominal = self.pair_gbps_nominal(a, b);
                    if nominal > 0.0 {
                        share = share.min(self.pair_gbps(a, b, false).0 / nominal);
                    }
                }
            }
            if share.is_finite() {
                peak *= share.min(1.0);
            }
        }
        for f in self.faults_of(FaultKind::SlowCollective) {
            if f.op.unwrap_or(CollectiveOp::AllReduce) == op {
                peak *= f.factor.unwrap_or(0.7);
            }
        }
        peak
    }

    /// Modelled time of one collective, microseconds.
    fn coll_time_us(&self, op: CollectiveOp, bytes: u64, no_nvls: bool) -> f64 {
        let all: Vec<usize> = (0..self.n()).collect();
        self.coll_time_over_us(op, bytes, no_nvls, &all)
    }

    /// Modelled time of one collective among the GPUs `ranks`, microseconds.
    fn coll_time_over_us(
        &self,
        op: CollectiveOp,
        bytes: u64,
        no_nvls: bool,
        ranks: &[usize],
    ) -> f64 {
        let n = ranks.len();
        let factor = op.busbw_factor(n);
        let peak = self.coll_peak_over(op, no_nvls, ranks);
        let lat = self.node.perf.collective_latency_us * (1.0 + (n as f64).log2().max(0.0) * 0.25);
        if factor == 0.0 || peak <= 0.0 {
            // One rank: a local copy at device speed.
            return lat * 0.1 + bytes as f64 / (self.node.perf.device_copy_gbps * 1e3);
        }
        lat + bytes as f64 * factor / (peak * 1e3)
    }
}

/// The latency of a collective across two nodes, microseconds (NCCL over InfiniBand: a few
/// microseconds per hop); it grows with the log of the node count.
const FABRIC_LATENCY_US: f64 = 20.0;

impl SimBackend {
    /// One modelled collective at one size, as NCCL chooses or with NVLS forced off.
    fn coll_sample(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        iters: u32,
        no_nvls: bool,
    ) -> CollectiveSample {
        let key = self.begin(format!(
            "coll {op} {bytes}{}",
            if no_nvls { " no-nvls" } else { "" }
        ));
        let t = self.coll_time_us(op, bytes, no_nvls);
        // What each rank receives, as NCCL's layout has it: nothing for an all_gather,
        // reduce_scatter or all_to_all under 16 bytes a rank.
        let layout = crate::backend::cuda::verify::layout(op, self.n(), bytes);
        let elements = layout.recv_count as u64;
        let corrupt = self
            .faults_of(FaultKind::CollectiveCorrupt)
            .any(|f| f.op.unwrap_or(CollectiveOp::AllReduce) == op);
        // A corrupted reduction shows up once buffers span more than a few pages.
        let wrong = if corrupt && bytes >= 1 << 16 {
            (elements / 1024).max(1)
        } else {
            0
        };
        CollectiveSample {
            time_us: self.samples(&key, t, iters),
            elements_checked: elements * self.n() as u64,
            wrong_elements: wrong,
            ranks: self.n(),
            bytes: layout.counted_bytes,
        }
    }
}

impl Backend for SimBackend {
    fn nccl_settings(&self) -> Vec<crate::backend::NcclSetting> {
        self.nccl_env.clone()
    }

    fn fabric(&mut self, gpus: &[Gpu]) -> Result<Option<crate::network::Fabric>, HwError> {
        Ok(self.sim_fabric(gpus, true))
    }

    /// Each GPU's processes now: busy-gpu's since the start, and process-starts' since the run
    /// began (the inventory, read before it, does not list them). No figure drawn.
    fn gpu_processes(&mut self) -> Result<Vec<Option<Vec<GpuProcess>>>, HwError> {
        Ok((0..self.n())
            .map(|i| {
                if self.hidden(self.orig(i)).contains(&Reading::Processes) {
                    return None;
                }
                let on_i = |k| self.faults_of(k).filter(move |f| f.gpu.unwrap_or(0) == i);
                let busy = on_i(FaultKind::BusyGpu).map(|_| busy_process());
                let started = on_i(FaultKind::ProcessStarts).map(|_| GpuProcess {
                    pid: STARTED_PID,
                    name: Some("torchrun".into()),
                    memory_bytes: Some(STARTED_MEMORY),
                });
                Some(busy.chain(started).collect())
            })
            .collect())
    }

    fn xids_since(&mut self) -> Result<Vec<Option<Vec<XidEvent>>>, HwError> {
        let told = std::mem::replace(&mut self.xids_told, true);
        Ok((0..self.n())
            .map(|i| {
                if self.hidden(self.orig(i)).contains(&Reading::Xids) {
                    return None;
                }
                Some(
                    self.faults_of(FaultKind::XidUnderLoad)
                        .filter(|f| !told && f.gpu.unwrap_or(0) == i)
                        .map(|f| XidEvent {
                            code: f.code.unwrap_or(48),
                            source: "nvml event".into(),
                            detail: Some("simulated, under load".into()),
                            age_s: Some(0.0),
                        })
                        .collect(),
                )
            })
            .collect())
    }

    /// The counters the inventory reads, grown by the under-load faults (which the inventory,
    /// read before any check, does not show). A counter the node hides stays unread, fault or
    /// not. No figure drawn.
    fn error_counts(&mut self) -> Result<Vec<Option<ErrorCounts>>, HwError> {
        let inv = self.inventory()?;
        Ok(inv
            .gpus
            .iter()
            .map(|g| {
                let mut c = ErrorCounts::of(g);
                for f in self.faults.iter().filter(|f| f.gpu.unwrap_or(0) == g.index) {
                    match f.kind {
                        FaultKind::EccUnderLoad => {
                            let more = |v: &mut Option<u64>| *v = v.map(|n| n.saturating_add(1));
                            more(&mut c.ecc.volatile_uncorrected);
                            more(&mut c.ecc.aggregate_uncorrected);
                            if let Some(r) = &mut c.remapped_rows {
                                r.uncorrectable = r.uncorrectable.saturating_add(1);
                                r.pending = true;
                            }
                        }
                        FaultKind::LinkErrorsUnderLoad => {
                            if let Some((_, e)) = c.nvlinks.first_mut() {
                                e.crc_flit = e.crc_flit.map(|n| n.saturating_add(500));
                            }
                            c.pcie_replays = c.pcie_replays.map(|n| n.saturating_add(200));
                        }
                        FaultKind::NvlinkDownUnderLoad if !c.nvlinks.is_empty() => {
                            let (l, _) = c.nvlinks.remove(0);
                            c.links_down.push(l);
                        }
                        _ => {}
                    }
                }
                Some(c)
            })
            .collect())
    }

    fn fabric_supported(&mut self) -> Result<(), HwError> {
        match self.node.network {
            Some(_) => Ok(()),
            None => Err(HwError::NotSupported(
                "the simulated node describes no NICs ([network])".into(),
            )),
        }
    }

    fn fabric_id(&mut self) -> Result<Vec<u8>, HwError> {
        self.fabric_supported()?;
        // As NCCL's: 128 bytes, new each time (two ids never name the same communicator).
        let mut id = vec![0u8; crate::backend::NCCL_ID_BYTES];
        getrandom::getrandom(&mut id).map_err(|e| HwError::Call {
            call: "making a unique id".into(),
            detail: e.to_string(),
        })?;
        Ok(id)
    }

    fn fabric_collective(
        &mut self,
        comm: &crate::backend::FabricComm,
        ops: &[CollectiveOp],
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Vec<CollectiveSample>>, HwError> {
        let _ = warmup;
        let Some(f) = self.sim_fabric(&[], false) else {
            return Err(HwError::NotSupported(
                "the simulated node describes no NICs ([network])".into(),
            ));
        };
        let n = self.n();
        if comm.id.len() != crate::backend::NCCL_ID_BYTES
            || comm.nodes < 2
            || comm.first_rank + n > comm.ranks
        {
            return Err(HwError::Call {
                call: "NCCL across nodes (simulated)".into(),
                detail: format!(
                    "{} GPUs as ranks {}.. of {} over {} nodes, id of {} bytes: not a communicator",
                    n,
                    comm.first_rank,
                    comm.ranks,
                    comm.nodes,
                    comm.id.len()
                ),
            });
        }
        // What this node drives into the fabric: its NICs (NCCL spreads the collective over
        // those that are up, so the slowest sets the pace); the others' figures are theirs,
        // and the slowest node sets the communicator's.
        let peak = super::sim_nic::node_busbw(&f);
        let corrupt = self.faults_of(FaultKind::FabricCorrupt).next().is_some();
        let lat = FABRIC_LATENCY_US * (1.0 + (comm.nodes as f64).log2());
        let mut out = Vec::with_capacity(ops.len());
        for &op in ops {
            let mut per = Vec::with_capacity(sizes.len());
            for &bytes in sizes {
                let l = crate::backend::cuda::verify::layout(op, comm.ranks, bytes);
                let key = self.begin(format!("fabric {op} {bytes} {}", comm.nodes));
                let factor = op.busbw_factor(comm.ranks);
                let t = if peak > 0.0 {
                    lat + l.counted_bytes as f64 * factor / (peak * 1e3)
                } else {
                    // No port up: NCCL would not get through at all; a figure near zero.
                    1e9
                };
                // As the real check: every element up to 64 Mi per GPU, windows beyond.
                let per_gpu = l.recv_count.min(crate::backend::cuda::nccl::FULL_CHECK);
                let elements = per_gpu as u64 * n as u64;
                per.push(CollectiveSample {
                    time_us: self.samples(&key, t, iters),
                    elements_checked: elements,
                    wrong_elements: if corrupt && bytes >= 1 << 16 {
                        (elements / 1024).max(1)
                    } else {
                        0
                    },
                    ranks: comm.ranks,
                    bytes: l.counted_bytes,
                });
            }
            out.push(per);
        }
        Ok(out)
    }

    fn info(&self) -> BackendInfo {
        let faults: Vec<String> = self.faults.iter().map(Fault::label).collect();
        BackendInfo {
            simulated: true,
            name: format!(
                "simulated node {} (seed {}{})",
                self.node.name,
                self.seed,
                if faults.is_empty() {
                    String::new()
                } else {
                    format!(", faults: {}", faults.join(" "))
                }
            ),
            libraries: vec![],
            nccl_version: None,
            nccl_env: crate::backend::NcclSetting::in_evidence(&self.nccl_env),
        }
    }

    fn inventory(&mut self) -> Result<Inventory, HwError> {
        let node = &self.node;
        let hopper = ["H100", "H200", "H800", "GH200"]
            .iter()
            .any(|m| node.gpu.name.contains(m));
        let n = self.n();
        let mut gpus = Vec::new();
        for i in 0..n {
            let o = self.orig(i);
            let (gen, width) = self.pcie_of(i);
            let idle_gen = node.gpu.pcie_idle_gen.map_or(gen, |g| g.min(gen));
            // Below the maximum at rest: read again under load, as the real backend does.
            let loaded = (idle_gen, width) != (node.gpu.pcie_gen, node.gpu.pcie_width);
            let numa = node.gpu.numa_nodes.get(o).copied();
            let cpus = numa.and_then(|m| node.gpu.numa_cpus.get(m as usize).cloned());
            let mut throttle = Vec::new();
            let mut ecc = EccCounts {
                volatile_corrected: Some(0),
                volatile_uncorrected: Some(0),
                aggregate_corrected: Some(node.health.aggregate_corrected),
                aggregate_uncorrected: Some(0),
                sram_corrected: Some(0),
                sram_uncorrected: Some(0),
                dram_errors: Some(node.health.aggregate_corrected),
            };
            let mut rows = RemappedRows::default();
            let mut xids = Vec::new();
            let mut vbios = node.gpu.vbios.clone();
            let mut nvls = if node.links.nvls {
                Nvls {
                    multicast: Some(true),
                    fabric: Some(FabricState::Completed),
                }
            } else {
                Nvls {
                    multicast: Some(false),
                    fabric: None,
                }
            };
            let mut compute_mode = ComputeMode::Default;
            let mut mig_pending = None;
            let mut others: Vec<GpuProcess> = Vec::new();
            for f in &self.faults {
                if f.kind == FaultKind::ExclusiveProcess && f.gpu.is_none_or(|g| g == i) {
                    compute_mode = ComputeMode::ExclusiveProcess;
                }
                if f.kind == FaultKind::NvlsUnavailable && f.gpu.is_none_or(|g| g == i) {
                    nvls = Nvls {
                        multicast: Some(false),
                        fabric: node.links.nvswitch.then_some(FabricState::NotStarted),
                    };
                }
                if f.gpu.unwrap_or(0) != i {
                    continue;
                }
                match f.kind {
                    FaultKind::EccUncorrectable => {
                        ecc.volatile_uncorrected = Some(1);
                        ecc.aggregate_uncorrected = Some(1);
                        ecc.sram_uncorrected = Some(1);
                    }
                    FaultKind::RowRemapPending => {
                        rows.pending = true;
                        rows.uncorrectable = 1;
                    }
                    FaultKind::Xid => xids.push(match f.age_h {
                        // An XID in the kernel log, logged `age_h` hours before the run.
                        Some(h) => XidEvent {
                            code: f.code.unwrap_or(79),
                            source: "kernel log".into(),
                            detail: Some(format!("simulated, logged {h} h before the run")),
                            age_s: Some(h * 3600.0),
                        },
                        None => XidEvent {
                            code: f.code.unwrap_or(79),
                            source: "nvml event".into(),
                            detail: Some("simulated".into()),
                            age_s: Some(0.0),
                        },
                    }),
                    FaultKind::ThermalThrottle => throttle.push("hw_thermal_slowdown".to_string()),
                    FaultKind::VbiosMismatch => vbios = other_vbios(&vbios),
                    FaultKind::MigPending => mig_pending = Some(true),
                    FaultKind::BusyGpu => others.push(busy_process()),
                    _ => {}
                }
            }
            let mut nvlinks = Vec::new();
            if node.links.nvswitch {
                let active = self.gpu_links(o);
                for l in 0..node.links.nvlinks_per_gpu {
                    nvlinks.push(NvLink {
                        link: l,
                        active: l < active,
                        version: node.links.nvlink_version,
                        remote: LinkRemote {
                            kind: RemoteKind::NvSwitch,
                            pci_bus_id: Some(format!(
                                "0000:{:02x}:00.0",
                                0xf0 + (l % node.links.nvswitches.max(1))
                            )),
                            gpu: None,
                        },
                        errors: NvLinkErrors {
                            replay: Some(0),
                            recovery: Some(0),
                            crc_flit: Some(0),
                            crc_data: Some(0),
                            ecc_data: None,
                        },
                    });
                }
            } else {
                let mut l = 0;
                for j in 0..n {
                    if j == i {
                        continue;
                    }
                    let nominal = self.pair_links_nominal(i, j);
                    let active = self.pair_links(i, j);
                    for k in 0..nominal {
                        nvlinks.push(NvLink {
                            link: l,
                            active: k < active,
                            version: node.links.nvlink_version,
                            remote: LinkRemote {
                                kind: RemoteKind::Gpu,
                                pci_bus_id: Some(self.bus_id(self.orig(j))),
                                gpu: Some(j),
                            },
                            errors: NvLinkErrors {
                                replay: Some(0),
                                recovery: Some(0),
                                crc_flit: Some(0),
                                crc_data: Some(0),
                                ecc_data: None,
                            },
                        });
                        l += 1;
                    }
                }
            }
            gpus.push(Gpu {
                index: i,
                name: node.gpu.name.clone(),
                uuid: match &self.named {
                    Some(n) => sim_uuid(&format!("{}@{n}", node.name), o),
                    None => sim_uuid(&node.name, o),
                },
                serial: Some(match &self.named {
                    Some(n) => {
                        let d = Sha256::digest(format!("serial/{n}/{o}"));
                        let v = u64::from_be_bytes(d[..8].try_into().unwrap_or_default());
                        format!("SIM{:010}", v % 10_000_000_000)
                    }
                    None => format!("SIM{:010}", 1_652_000_000u64 + o as u64),
                }),
                vbios: Some(vbios),
                pci_bus_id: self.bus_id(o),
                memory_bytes: node.gpu.memory_bytes,
                pcie: PcieLink {
                    gen_current: Some(idle_gen),
                    gen_max: Some(node.gpu.pcie_gen),
                    width_current: Some(width),
                    width_max: Some(node.gpu.pcie_width),
                    gen_loaded: loaded.then_some(gen),
                    width_loaded: loaded.then_some(width),
                    replay_counter: Some(node.health.pcie_replays),
                },
                numa_node: numa,
                cpu_affinity: cpus,
                cpu_socket: numa.and_then(|m| {
                    if node.gpu.numa_sockets.is_empty() {
                        u32::try_from(m).ok()
                    } else {
                        node.gpu.numa_sockets.get(usize::try_from(m).ok()?).copied()
                    }
                }),
                persistence_mode: Some(true),
                mig_enabled: Some(false),
                mig_pending,
                compute_mode: Some(compute_mode),
                memory_used_bytes: Some(others.iter().filter_map(|p| p.memory_bytes).sum::<u64>()),
                processes: Some(others),
                ecc_enabled: Some(node.gpu.ecc),
                ecc,
                remapped_rows: Some(rows),
                // Hopper GPUs answer only the row-remapping query; older ones both.
                retired_pages: (!hopper).then(RetiredPages::default),
                throttle_reasons: throttle,
                sm_clock_mhz: Some(node.gpu.sm_clock_max_mhz),
                sm_clock_max_mhz: Some(node.gpu.sm_clock_max_mhz),
                power_limit_w: Some(node.gpu.power_limit_w),
                temperature_c: Some(node.gpu.temperature_c),
                nvlinks,
                xids,
                nvls,
                unavailable: vec![],
            });
            let g = gpus.last_mut().expect("just pushed");
            for r in self.hidden(o) {
                hide(g, r);
            }
        }
        let mut pairs = Vec::new();
        // Counted from the links, as a real node counts them: none seen of a GPU whose link state
        // is hidden.
        let state_hidden = |i: usize| {
            gpus.get(i)
                .is_some_and(|g: &Gpu| !g.gives(Reading::NvlinkState))
        };
        for a in 0..n {
            for b in (a + 1)..n {
                let links = match state_hidden(a) || state_hidden(b) {
                    true => 0,
                    false => self.pair_links(a, b),
                };
                let p2p = self.p2p_enabled(a, b);
                pairs.push(GpuPair {
                    a,
                    b,
                    nvlinks: links,
                    pcie_path: Some(node.pcie_label(self.orig(a), self.orig(b))),
                    p2p: P2pStatus {
                        read: Some(p2p),
                        write: Some(p2p),
                        nvlink: Some(p2p && links > 0),
                        atomics: Some(p2p && links > 0),
                    },
                });
            }
        }
        let mut mode = node.virtualization.mode;
        if self.faults_of(FaultKind::Vgpu).next().is_some() {
            mode = VirtMode::Vgpu;
        }
        let mut witnesses = vec![Witness {
            source: "nvml virtualization mode".into(),
            finding: match mode {
                VirtMode::BareMetal => "None (bare metal)".into(),
                VirtMode::Passthrough => "PassThrough".into(),
                VirtMode::Vgpu => "VGPU".into(),
                VirtMode::Unknown => "not available".into(),
            },
        }];
        witnesses.push(Witness {
            source: "cpuinfo hypervisor flag".into(),
            finding: if mode == VirtMode::BareMetal {
                "absent".into()
            } else {
                "present".into()
            },
        });
        if let Some(h) = &node.virtualization.hypervisor {
            witnesses.push(Witness {
                source: "cpuid 0x40000000".into(),
                finding: h.clone(),
            });
        }
        let mut unavailable = Vec::new();
        for g in &gpus {
            for r in self.hidden(self.orig(g.index)) {
                if r != Reading::DriverVersion {
                    unavailable.push(format!(
                        "gpu{} {}: not available (hidden by the simulated node)",
                        g.index,
                        r.describe()
                    ));
                }
            }
            if g.retired_pages.is_none() {
                unavailable.push(format!(
                    "gpu{} retired pages: not supported (this GPU remaps rows instead)",
                    g.index
                ));
            }
            if g.numa_node.is_none() {
                unavailable.push(format!("gpu{} numa node: not reported", g.index));
            }
        }
        // As the real backend reports a GPU that NVML lists but cannot hand out.
        let lost_gpus: Vec<LostGpu> = self
            .faults_of(FaultKind::GpuLost)
            .map(|f| LostGpu::unlisted(f.gpu.unwrap_or(node.gpu.count - 1) as u32))
            .collect();
        if self.present.is_empty() && !lost_gpus.is_empty() {
            // The real backend cannot open such a node either.
            return Err(HwError::Unavailable {
                what: "a GPU".into(),
                detail: format!(
                    "all {} GPUs of the simulated node fell off the bus (gpu-lost)",
                    node.gpu.count
                ),
            });
        }
        let fabric = self.sim_fabric(&gpus, false);
        let daemon = self.faults_of(FaultKind::MpsDaemon).next().is_some();
        let mps = Some(Mps {
            pipe_dir: crate::platform::mps::DEFAULT_PIPE_DIR.into(),
            socket: daemon,
            pid: daemon.then_some(MPS_DAEMON_PID),
        });
        let links_unread = gpus.iter().any(|g| !g.gives(Reading::NvlinkState));
        Ok(Inventory {
            fabric,
            lost_gpus,
            mps,
            hostname: node.hostname.clone(),
            driver_version: (!self.hides_driver_version()).then(|| node.driver_version.clone()),
            cuda_driver_version: Some(node.cuda_driver_version.clone()),
            nvml_version: Some(format!("sim.{}", node.driver_version)),
            gpus,
            pairs,
            // Counted from the links' far ends: not known where a GPU's links were not read.
            nvswitches: (!links_unread).then_some(if node.links.nvswitch {
                node.links.nvswitches
            } else {
                0
            }),
            virtualization: Virtualization {
                mode,
                hypervisor: node.virtualization.hypervisor.clone(),
                witnesses,
                iommu_groups: node.virtualization.iommu_groups,
                acs_enabled_bridges: vec![],
                acs_unknown_bridges: vec![],
            },
            unavailable,
        })
    }

    fn host_copy(
        &mut self,
        gpu: usize,
        dir: HostDir,
        _bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        self.check_gpu(gpu)?;
        let key = self.begin(format!("host {dir:?} {gpu}"));
        let p = &self.node.perf;
        let base = match dir {
            HostDir::H2d => p.h2d_gbps,
            HostDir::D2h => p.d2h_gbps,
            HostDir::Bidir => p.bidir_gbps,
        };
        let mean = base * self.host_factor(gpu);
        Ok(Samples {
            values: self.samples(&key, mean, iters),
            verified: Some(!self.host_copy_corrupt(gpu)),
            timing: None,
            host_memory: None,
        })
    }

    fn host_copy_all(
        &mut self,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Samples>, HwError> {
        let n = self.n();
        let key = self.begin(format!("host-all {dir:?}"));
        let mut each: Vec<f64> = (0..n)
            .map(|i| {
                let p = &self.node.perf;
                let base = match dir {
                    HostDir::H2d => p.h2d_gbps,
                    HostDir::D2h => p.d2h_gbps,
                    HostDir::Bidir => p.bidir_gbps,
                };
                base * self.host_factor(i)
            })
            .collect();
        let agg = self.node.perf.host_aggregate_gbps;
        let total: f64 = each.iter().sum();
        if agg > 0.0 && total > agg {
            each.iter_mut().for_each(|x| *x *= agg / total);
        }
        let _ = (bytes, warmup);
        Ok(each
            .iter()
            .enumerate()
            .map(|(i, m)| Samples {
                values: self.samples(&format!("{key} {i}"), *m, iters),
                verified: Some(!self.host_copy_corrupt(i)),
                timing: None,
                host_memory: None,
            })
            .collect())
    }

    fn device_copy(
        &mut self,
        gpu: usize,
        _bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        self.check_gpu(gpu)?;
        let key = self.begin(format!("d2d {gpu}"));
        Ok(Samples {
            values: self.samples(&key, self.node.perf.device_copy_gbps, iters),
            verified: Some(!self.host_copy_corrupt(gpu)),
            timing: None,
            host_memory: None,
        })
    }

    fn p2p_copy(
        &mut self,
        src: usize,
        dst: usize,
        mode: P2pMode,
        _bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<P2pSample, HwError> {
        self.check_gpu(src)?;
        self.check_gpu(dst)?;
        let key = self.begin(format!("p2p {mode:?} {src} {dst}"));
        let (one, both) = self.pair_gbps(src, dst, true);
        let mean = match mode {
            P2pMode::Read => one,
            P2pMode::Write => one * 0.995,
            P2pMode::Bidir => both,
        };
        Ok(P2pSample {
            gbps: Samples {
                values: self.samples(&key, mean, iters),
                verified: Some(!self.pair_copy_corrupt(src, dst)),
                timing: None,
                host_memory: None,
            },
            peer_access: self.p2p_enabled(src, dst),
        })
    }

    fn p2p_latency(&mut self, src: usize, dst: usize, iters: u32) -> Result<Samples, HwError> {
        self.check_gpu(src)?;
        self.check_gpu(dst)?;
        let key = self.begin(format!("lat {src} {dst}"));
        let p = &self.node.perf;
        let mean = if self.p2p_enabled(src, dst) {
            match self.pcie_class(src, dst) {
                Some(c) if self.pair_links_nominal(src, dst) == 0 => p
                    .p2p_latency_us_by_path
                    .get(&c)
                    .copied()
                    .unwrap_or(p.p2p_latency_us),
                _ => p.p2p_latency_us,
            }
        } else {
            p.staged_latency_us
        };
        Ok(Samples {
            values: self.samples(&key, mean, iters.min(100)),
            // As the CUDA code does, the transfers' data is checked.
            verified: Some(!self.pair_copy_corrupt(src, dst)),
            timing: None,
            host_memory: None,
        })
    }

    fn collective(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<CollectiveSample, HwError> {
        Ok(self.coll_sample(op, bytes, iters, false))
    }

    fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        _warmup: u32,
        iters: u32,
    ) -> Result<Vec<CollectiveSample>, HwError> {
        Ok(sizes
            .iter()
            .map(|&s| self.coll_sample(op, s, iters, true))
            .collect())
    }

    fn gemm(
        &mut self,
        gpu: usize,
        precision: GemmPrecision,
        n: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<GemmSample, HwError> {
        self.check_gpu(gpu)?;
        let peak = self.gemm_peak(precision)?;
        let key = self.begin(format!("gemm {precision} {gpu}"));
        let rate = self.gemm_rate(gpu, peak, n);
        let corrupt = self
            .faults_of(FaultKind::ComputeCorrupt)
            .any(|f| f.gpu.unwrap_or(0) == gpu);
        Ok(GemmSample {
            tflops: self.samples(&key, rate, iters),
            elements_checked: n * n,
            // One wrong column, as a broken tensor core tile would leave.
            wrong_elements: if corrupt { n } else { 0 },
            timing: None,
        })
    }

    fn sustained_gemm(
        &mut self,
        precision: GemmPrecision,
        n: u64,
        seconds: f64,
        sample_ms: u32,
    ) -> Result<Vec<SustainedRun>, HwError> {
        let peak = self.gemm_peak(precision)?;
        let windows =
            ((seconds * 1000.0 / f64::from(sample_ms.max(1))).ceil() as usize).clamp(1, 100_000);
        let gpu = self.node.gpu.clone();
        // At its power cap a healthy GPU computes and clocks below its burst figures.
        let kept = self.node.perf.sustained_rate_fraction.unwrap_or(1.0);
        let clock = self
            .node
            .perf
            .sustained_sm_clock_mhz
            .unwrap_or(gpu.sm_clock_max_mhz);
        let mut out = Vec::new();
        for g in 0..self.n() {
            let key = self.begin(format!("sustained {precision} {g}"));
            let rate = self.gemm_rate(g, peak, n);
            // Thermal slowdown sets in once the GPU has heated (after 40% of the run); before,
            // the GPU computes at its full rate (compute_factor includes the slowdown).
            let thermal = self
                .faults_of(FaultKind::ThermalThrottle)
                .any(|f| f.gpu.unwrap_or(0) == g);
            let onset = windows * 2 / 5;
            let power_share = self
                .faults_of(FaultKind::PowerLimited)
                .find(|f| f.gpu.unwrap_or(0) == g)
                .map(|f| f.factor.unwrap_or(0.6));
            // A GPU held below its power target computes and clocks in proportion.
            let power_factor = power_share.map_or(1.0, |s| (s / 0.97).min(1.0));
            let noise = self.samples(&key, 1.0, windows.min(200) as u32);
            let corrupt = self
                .faults_of(FaultKind::ComputeCorrupt)
                .any(|f| f.gpu.unwrap_or(0) == g);
            let mut tflops = Vec::with_capacity(windows);
            let mut samples = Vec::with_capacity(windows);
            for w in 0..windows {
                let hot = thermal && w >= onset;
                let slow = if thermal && !hot {
                    1.0 / THERMAL_SLOWDOWN_FACTOR
                } else {
                    1.0
                };
                let z = noise[w % noise.len()];
                tflops.push(rate * kept * slow * power_factor * z);
                let heat = 1.0 - (-(w as f64 + 1.0) / (windows as f64 / 4.0)).exp();
                let top = if thermal { 92.0 } else { 72.0 };
                samples.push(crate::backend::LoadSample {
                    t_s: (w + 1) as f64 * f64::from(sample_ms) / 1000.0,
                    sm_clock_mhz: Some(
                        (f64::from(clock)
                            * power_factor
                            * if hot { THERMAL_SLOWDOWN_FACTOR } else { 1.0 })
                            as u32,
                    ),
                    power_w: Some(gpu.power_limit_w * power_share.unwrap_or(0.97) * z),
                    temperature_c: Some(gpu.temperature_c + (top - gpu.temperature_c) * heat),
                    // At full load a healthy GPU sits at its power cap.
                    throttle: Some(if hot {
                        vec!["hw_thermal_slowdown".to_string()]
                    } else if power_share.is_none() {
                        vec!["sw_power_cap".to_string()]
                    } else {
                        vec![]
                    }),
                });
            }
            out.push(SustainedRun {
                tflops,
                samples,
                power_limit_w: Some(gpu.power_limit_w),
                elements_checked: n * n,
                wrong_elements: if corrupt { n } else { 0 },
            });
        }
        Ok(out)
    }

    fn training(&mut self, cfg: &crate::suite::TrainingCheck) -> Result<TrainingRun, HwError> {
        self.train_data_parallel(cfg)
    }

    fn training_method(
        &mut self,
        cfg: &crate::suite::TrainingCheck,
        p: crate::training::partition::Partition,
    ) -> Result<MethodRun, HwError> {
        self.train_partitioned(cfg, p)
    }
}

/// [`hide`], for the health check's tests.
#[cfg(test)]
pub(crate) fn hide_for_tests(g: &mut Gpu, r: Reading) {
    hide(g, r)
}

/// Make a GPU's reading unread, as a platform that does not give it leaves it (faults included:
/// what cannot be read cannot show a fault either).
fn hide(g: &mut Gpu, r: Reading) {
    match r {
        Reading::DriverVersion => {}
        Reading::EccMode => g.ecc_enabled = None,
        Reading::EccErrors => g.ecc = EccCounts::default(),
        Reading::RemappedRows => {
            g.remapped_rows = None;
            g.retired_pages = None;
        }
        Reading::Xids => g.xids.clear(),
        // Only the XIDs of the run itself stay: the simulated node logs none before it.
        Reading::XidHistory => g.xids.retain(|x| x.age_s.is_none_or(|a| a <= 0.0)),
        Reading::PcieReplays => g.pcie.replay_counter = None,
        Reading::NvlinkErrors => g
            .nvlinks
            .iter_mut()
            .for_each(|l| l.errors = NvLinkErrors::default()),
        // The links read before the state failed are dropped too: what a platform that does not
        // give the state leaves is no link, as a real one that fails at the first.
        Reading::NvlinkState => g.nvlinks.clear(),
        Reading::ThrottleReasons => g.throttle_reasons.clear(),
        Reading::Temperature => g.temperature_c = None,
        Reading::Vbios => g.vbios = None,
        // The memory in use stays: it is what shows a process the list does not.
        Reading::Processes => g.processes = None,
        // As the real backend shows a name or size NVML did not give.
        Reading::Model => g.name = "unknown GPU".into(),
        Reading::Memory => g.memory_bytes = 0,
    }
    // Fields that cannot be None say it in the list.
    if matches!(
        r,
        Reading::Xids
            | Reading::XidHistory
            | Reading::ThrottleReasons
            | Reading::NvlinkState
            | Reading::Model
            | Reading::Memory
    ) && !g.unavailable.contains(&r)
    {
        g.unavailable.push(r);
    }
}

/// The fraction of the bf16 GEMM rate a bf16 MLP training step reaches, as a whole, measured:
/// on the lent H200 (2026-12-04) nodecert's bf16 step of the anchor MLP took a median 2.65 ms,
/// 6 x 21.0M parameters x 8192 samples in 2.65 ms = 390 TFLOP/s, 0.47 of the 832.0 TFLOP/s its
/// bf16 GEMM measured at 8192^3 there (`perf.bf16_tflops`). The rest of a step: the thin
/// products of the input and the 10-class output layers, and memory-bound kernels (bias and
/// ReLU, softmax, the bf16 conversions, the update) that take about as long as in fp32, hidden
/// behind fp32's 20 ms of GEMMs and a large share of bf16's.
pub const BF16_MLP_STEP_EFFICIENCY: f64 = 0.47;

/// The MPS control daemon's PID where the mps-daemon fault runs one.
pub const MPS_DAEMON_PID: u32 = 2727;

/// The process a busy-gpu fault puts on its GPU: its PID and the memory it holds.
pub const BUSY_PID: u32 = 4242;
pub const BUSY_MEMORY: u64 = 30 << 30;

/// The process a busy-gpu fault puts on its GPU.
fn busy_process() -> GpuProcess {
    GpuProcess {
        pid: BUSY_PID,
        name: Some("python3".into()),
        memory_bytes: Some(BUSY_MEMORY),
    }
}

/// The process a process-starts fault starts on its GPU during the run.
pub const STARTED_PID: u32 = 5151;
pub const STARTED_MEMORY: u64 = 20 << 30;

impl SimBackend {
    /// The GEMM rate GPU `i` reaches (after faults), as a share of the node's figure: slow-compute
    /// and busy-gpu by their factors, a GPU in hardware thermal slowdown to 0.7 of its rate.
    fn compute_factor(&self, i: usize) -> f64 {
        let mut f = 1.0;
        for x in self.faults_of(FaultKind::SlowCompute) {
            if x.gpu.unwrap_or(0) == i {
                f *= x.factor.unwrap_or(0.35);
            }
        }
        for x in self
            .faults_of(FaultKind::BusyGpu)
            .chain(self.faults_of(FaultKind::ProcessStarts))
        {
            if x.gpu.unwrap_or(0) == i {
                f *= x.factor.unwrap_or(0.5);
            }
        }
        if self
            .faults_of(FaultKind::ThermalThrottle)
            .any(|x| x.gpu.unwrap_or(0) == i)
        {
            f *= THERMAL_SLOWDOWN_FACTOR;
        }
        f
    }

    /// The rate GPU `gpu` multiplies matrices of side `n` at, TFLOP/s, from the node's `peak`:
    /// the arithmetic at the GPU's share of it, plus a fixed cost per GEMM.
    fn gemm_rate(&self, gpu: usize, peak: f64, n: u64) -> f64 {
        let flops = 2.0 * (n as f64).powi(3);
        let time_s = flops / (peak * self.compute_factor(gpu) * 1e12) + GEMM_OVERHEAD_US * 1e-6;
        flops / time_s / 1e12
    }

    /// The node's dense GEMM rate in `p`, TFLOP/s, or why the simulated node has none.
    fn gemm_peak(&self, p: GemmPrecision) -> Result<f64, HwError> {
        let gpu = &self.node.gpu;
        let need = p.min_compute_capability();
        if let Some(cc) = gpu.compute_capability.filter(|cc| *cc < need) {
            return Err(HwError::NotSupported(format!(
                "{p} GEMMs need compute capability {}.{} or newer; the {} is {}.{}",
                need.0, need.1, gpu.name, cc.0, cc.1
            )));
        }
        let perf = &self.node.perf;
        let rate = match p {
            GemmPrecision::Fp32 => Some(perf.fp32_tflops),
            GemmPrecision::Tf32 => perf.tf32_tflops,
            GemmPrecision::Bf16 => perf.bf16_tflops,
            GemmPrecision::Fp8 => perf.fp8_tflops,
        };
        rate.ok_or_else(|| {
            HwError::NotSupported(format!(
                "the simulated node {} does not model {p} GEMMs (no perf.{})",
                self.node.name,
                p.metric()
            ))
        })
    }

    /// The rate a bf16 training step runs at on this node, TFLOP/s; refused as on a real GPU when
    /// the node's GPUs have no bf16 tensor cores.
    fn bf16_step_tflops(&self, cfg: &crate::suite::TrainingCheck) -> Result<f64, HwError> {
        if let Some(cc) = self.node.gpu.compute_capability {
            let m = crate::training::plan::Model::main(cfg, self.n())?;
            crate::training::plan::check_arch(&m, cc, &format!("GPU 0 ({})", self.node.gpu.name))?;
        }
        match self.node.perf.bf16_tflops {
            Some(t) if t.is_finite() && t > 0.0 => Ok(t * BF16_MLP_STEP_EFFICIENCY),
            _ => Err(HwError::NotSupported(format!(
                "the simulated node {} does not model bf16 training: its description gives no \
                 perf.bf16_tflops (the GPU's dense bf16 GEMM rate)",
                self.node.name
            ))),
        }
    }
}

fn sim_uuid(node: &str, i: usize) -> String {
    let d = Sha256::digest(format!("{node}/{i}"));
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    crate::backend::real::order::uuid_text(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_node_loads() {
        for (name, _) in EMBEDDED {
            let n = load_node(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&n.name, name);
        }
    }

    /// `nodecert list` says what each fault does: each in words of its own.
    #[test]
    fn each_fault_is_described_in_words_of_its_own() {
        let mut seen = std::collections::BTreeSet::new();
        for k in FaultKind::ALL {
            let d = k.describe();
            assert!(d.split_whitespace().count() >= 4, "{}: {d:?}", k.name());
            assert!(seen.insert(d), "{} says what another fault says", k.name());
        }
        assert!(FaultKind::BusyGpu
            .describe()
            .contains("another process holds a GPU"));
    }

    /// busy-gpu puts one process on its GPU only, holding the memory in use, and leaves
    /// nodecert its factor of that GPU's GEMM rate (half by default); a healthy GPU lists none.
    #[test]
    fn a_busy_gpu_lists_its_process_and_keeps_a_share_of_its_rate() {
        let faults = vec![Fault::parse("busy-gpu:gpu=2").unwrap()];
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let job = GpuProcess {
            pid: 4242,
            name: Some("python3".into()),
            memory_bytes: Some(30 << 30),
        };
        assert_eq!(inv.gpus[2].processes, Some(vec![job]));
        assert_eq!(inv.gpus[2].memory_used_bytes, Some(30 << 30));
        for g in [0, 1, 3] {
            assert_eq!(inv.gpus[g].processes, Some(vec![]));
            assert_eq!(inv.gpus[g].memory_used_bytes, Some(0));
        }
        assert_eq!(b.compute_factor(2), 0.5);
        assert_eq!(b.compute_factor(1), 1.0);
        let faults = vec![Fault::parse("busy-gpu:gpu=1,factor=0.25").unwrap()];
        let b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        assert_eq!(b.compute_factor(1), 0.25);
    }

    /// process-starts' process is not in the inventory (read before the run) but is in every
    /// list read after it, on its GPU only, beside busy-gpu's; it takes its share of the GPU.
    /// A GPU whose list the node does not give reads None.
    #[test]
    fn a_process_that_starts_shows_only_after_the_inventory() {
        let faults = ["process-starts:gpu=2", "busy-gpu:gpu=2"]
            .map(|f| Fault::parse(f).unwrap())
            .to_vec();
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let pids = |l: &Option<Vec<GpuProcess>>| -> Vec<u32> {
            l.iter().flatten().map(|p| p.pid).collect()
        };
        assert_eq!(pids(&inv.gpus[2].processes), [BUSY_PID]);
        let now = b.gpu_processes().unwrap();
        assert_eq!(now.len(), 8);
        assert_eq!(pids(&now[2]), [BUSY_PID, STARTED_PID]);
        assert_eq!(
            now[2].as_ref().unwrap()[1].memory_bytes,
            Some(STARTED_MEMORY)
        );
        assert!([0, 1, 3, 7].iter().all(|&g| now[g] == Some(vec![])));
        assert_eq!(b.compute_factor(2), 0.25);
        let mut node = load_node("h100-sxm-8").unwrap();
        node.unavailable = vec![SimUnavailable {
            readings: vec![Reading::Processes],
            gpus: vec![2],
        }];
        let faults = vec![Fault::parse("process-starts:gpu=2").unwrap()];
        let mut b = SimBackend::new(node, faults, 1).unwrap();
        let now = b.gpu_processes().unwrap();
        assert_eq!((now[2].clone(), now[1].clone()), (None, Some(vec![])));
    }

    /// The under-load faults are not in the inventory (read before the run) but in every
    /// reading of the counters after it, on their GPU only; a counter the node hides stays
    /// unread, fault or not.
    #[test]
    fn errors_under_load_show_only_after_the_inventory() {
        let faults = [
            "ecc-under-load:gpu=1",
            "link-errors-under-load:gpu=6",
            "nvlink-down-under-load:gpu=2",
        ]
        .map(|f| Fault::parse(f).unwrap())
        .to_vec();
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults.clone(), 1).unwrap();
        let inv = b.inventory().unwrap();
        let start: Vec<ErrorCounts> = inv.gpus.iter().map(ErrorCounts::of).collect();
        assert_eq!(start[1].ecc.volatile_uncorrected, Some(0));
        assert_eq!(start[6].pcie_replays, Some(0));
        let now = b.error_counts().unwrap();
        let now: Vec<ErrorCounts> = now.into_iter().map(Option::unwrap).collect();
        assert_eq!(now[1].ecc.volatile_uncorrected, Some(1));
        assert_eq!(now[1].ecc.aggregate_uncorrected, Some(1));
        assert!(now[1].remapped_rows.as_ref().unwrap().pending);
        assert_eq!(now[6].pcie_replays, Some(200));
        assert_eq!(now[6].nvlinks[0].1.crc_flit, Some(500));
        assert_eq!(now[6].nvlinks[1].1.crc_flit, Some(0));
        assert!(start[2].links_down.is_empty());
        assert_eq!(now[2].links_down, [start[2].nvlinks[0].0]);
        assert_eq!(now[2].nvlinks[..], start[2].nvlinks[1..]);
        for g in [0, 3, 7] {
            assert_eq!(now[g], start[g], "GPU {g}");
        }
        let mut node = load_node("h100-sxm-8").unwrap();
        node.unavailable = vec![SimUnavailable {
            readings: vec![Reading::EccErrors, Reading::PcieReplays],
            gpus: vec![1, 6],
        }];
        let mut b = SimBackend::new(node, faults, 1).unwrap();
        let now = b.error_counts().unwrap();
        let (g1, g6) = (now[1].as_ref().unwrap(), now[6].as_ref().unwrap());
        assert_eq!((g1.ecc.volatile_uncorrected, g6.pcie_replays), (None, None));
        assert_eq!(g6.nvlinks[0].1.crc_flit, Some(500));
    }

    /// mig-pending sets its GPU's MIG mode to turn on at the next reset, that GPU only; the
    /// run's topology warns of it and the node still passes.
    #[test]
    fn mig_pending_marks_its_gpu_only_and_topology_warns() {
        let faults = vec![Fault::parse("mig-pending:gpu=4").unwrap()];
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let pending: Vec<Option<bool>> = inv.gpus.iter().map(|g| g.mig_pending).collect();
        let mut want = vec![None; 8];
        want[4] = Some(true);
        assert_eq!(pending, want);
        assert!(inv.gpus.iter().all(|g| g.mig_enabled == Some(false)));
        let ev = crate::testutil::simulated("h100-sxm-8", &["mig-pending:gpu=4"]);
        let topo = ev.checks.iter().find(|c| c.kind == "topology").unwrap();
        assert_eq!(topo.status, crate::evidence::Status::Warn, "{topo:#?}");
        assert_eq!(ev.verdict, crate::evidence::Verdict::Pass);
    }

    #[test]
    fn nvls_follows_the_node_key_and_the_fault() {
        let nvls = |name: &str, faults: &[&str]| -> Vec<Nvls> {
            let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
            let mut b = SimBackend::new(load_node(name).unwrap(), faults, 1).unwrap();
            b.inventory().unwrap().gpus.iter().map(|g| g.nvls).collect()
        };
        let on = Nvls {
            multicast: Some(true),
            fabric: Some(FabricState::Completed),
        };
        let fm_down = Nvls {
            multicast: Some(false),
            fabric: Some(FabricState::NotStarted),
        };
        for name in ["h100-sxm-8", "h200-sxm-8"] {
            assert_eq!(nvls(name, &[]), vec![on; 8], "{name}");
            assert_eq!(
                nvls(name, &["nvls-unavailable"]),
                vec![fm_down; 8],
                "{name}"
            );
        }
        // gpu=N: that GPU only.
        let one = nvls("h100-sxm-8", &["nvls-unavailable:gpu=3"]);
        assert_eq!(one[3], fm_down);
        assert!(one.iter().enumerate().all(|(i, n)| i == 3 || *n == on));
        // Default off: every node file that does not say `nvls = true` (A100, L40S, a VM).
        // (The all_reduce figure without NVLS is judged in nvls_unavailable_falls_back_to_ring.)
        for name in ["a100-sxm-80gb-8", "l40s-pcie-4", "h200-vm-1"] {
            assert!(
                nvls(name, &[]).iter().all(|n| n.multicast == Some(false)),
                "{name}"
            );
        }
    }

    #[test]
    fn nvls_unavailable_falls_back_to_ring() {
        let busbw = |name: &str, faults: &[&str], op: CollectiveOp| -> f64 {
            let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
            let mut node = load_node(name).unwrap();
            node.perf.noise_pct = 0.0;
            let mut b = SimBackend::new(node, faults, 1).unwrap();
            let bytes = 8u64 << 30;
            let r = b.collective(op, bytes, 1, 3).unwrap();
            crate::checks::collective::busbw_gbps(op, r.ranks, r.bytes, r.time_us[0])
        };
        let ar = CollectiveOp::AllReduce;
        for name in ["h100-sxm-8", "h200-sxm-8"] {
            let with = busbw(name, &[], ar);
            let without = busbw(name, &["nvls-unavailable"], ar);
            let one_gpu = busbw(name, &["nvls-unavailable:gpu=5"], ar);
            assert!((470.0..480.0).contains(&with), "{name}: {with}");
            assert!((360.0..368.0).contains(&without), "{name}: {without}");
            assert_eq!(one_gpu, without, "{name}: one GPU without NVLS is enough");
            // Only all_reduce uses NVLS here.
            let ag = CollectiveOp::AllGather;
            assert_eq!(busbw(name, &[], ag), busbw(name, &["nvls-unavailable"], ag));
        }
        // A node without NVLS has nothing to lose.
        let a100 = busbw("a100-sxm-80gb-8", &[], ar);
        assert_eq!(a100, busbw("a100-sxm-80gb-8", &["nvls-unavailable"], ar));
    }

    #[test]
    fn numa_sockets_give_each_gpu_its_socket() {
        let sockets = |node: &SimNode| -> Vec<Option<u32>> {
            let mut b = SimBackend::new(node.clone(), vec![], 1).unwrap();
            let inv = b.inventory().unwrap();
            inv.gpus.iter().map(|g| g.cpu_socket).collect()
        };
        let mut node = load_node("a100-sxm-80gb-8").unwrap();
        assert_eq!(sockets(&node), [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
        // Without numa_sockets each NUMA node is a socket of its own.
        node.gpu.numa_sockets.clear();
        assert_eq!(sockets(&node), [3, 3, 1, 1, 7, 7, 5, 5].map(Some));
        // A list too short for the GPUs' nodes is refused, at its key.
        node.gpu.numa_sockets = vec![0, 0, 0, 0];
        let (at, msg) = node.validate().unwrap_err();
        assert_eq!(at, "gpu.numa_sockets");
        assert!(msg.contains("a GPU is on node 7"), "{msg}");
    }

    /// A NUMA node's CPU list must be one: it becomes each GPU's affinity, and a suite frozen
    /// from the inventory must load (found by fuzzing: "16-K1,144-159" reached the suite).
    #[test]
    fn a_numa_cpu_list_that_is_not_one_is_refused_at_its_key() {
        let mut node = load_node("a100-sxm-80gb-8").unwrap();
        node.validate().unwrap();
        for bad in ["16-K1,144-159", "", "3-1", "x"] {
            node.gpu.numa_cpus[2] = bad.into();
            let (at, msg) = node.validate().unwrap_err();
            assert_eq!(at, "gpu.numa_cpus[2]", "{bad:?}");
            assert!(msg.contains("is not a CPU list"), "{msg}");
        }
    }

    #[test]
    fn faults_parse() {
        let f = Fault::parse("nvlink-down:gpu=2,peer=5").unwrap();
        assert_eq!(
            (f.kind, f.gpu, f.peer),
            (FaultKind::NvlinkDown, Some(2), Some(5))
        );
        assert_eq!(f.label(), "nvlink-down:gpu=2,peer=5");
        assert!(Fault::parse("nvlink-up").is_err());
        assert!(Fault::parse("slow-collective:op=all_sum").is_err());
        assert!(Fault::parse("slow-gpu-pair:gpu=x").is_err());
    }

    #[test]
    fn a_transient_slow_fault_shows_on_its_first_measurements_only() {
        let f = Fault::parse("slow-host-bandwidth:gpu=1,factor=0.5,attempts=2").unwrap();
        assert_eq!(f.label(), "slow-host-bandwidth:gpu=1,factor=0.5,attempts=2");
        let mut b = SimBackend::new(load_node("l40s-pcie-4").unwrap(), vec![f], 1).unwrap();
        let mut h2d = || {
            crate::evidence::median(&b.host_copy(1, HostDir::H2d, 1 << 20, 0, 9).unwrap().values)
        };
        let (first, second, third) = (h2d(), h2d(), h2d());
        let healthy = load_node("l40s-pcie-4").unwrap().perf.h2d_gbps;
        assert!(
            first < 0.6 * healthy && second < 0.6 * healthy,
            "{first} {second}"
        );
        assert!(third > 0.9 * healthy, "{third}");
        // A persistent fault shows every time.
        let f = Fault::parse("slow-host-bandwidth:gpu=1,factor=0.5").unwrap();
        let mut b = SimBackend::new(load_node("l40s-pcie-4").unwrap(), vec![f], 1).unwrap();
        for _ in 0..4 {
            let v = crate::evidence::median(
                &b.host_copy(1, HostDir::H2d, 1 << 20, 0, 9).unwrap().values,
            );
            assert!(v < 0.6 * healthy, "{v}");
        }
    }

    #[test]
    fn attempts_is_for_slow_faults_and_at_least_one() {
        for ok in [
            "slow-gpu-pair:gpu=0,peer=1,attempts=1",
            "slow-collective:op=all_gather,attempts=3",
        ] {
            assert!(Fault::parse(ok).is_ok(), "{ok}");
        }
        let e = Fault::parse("corrupt-copy:gpu=0,attempts=1").unwrap_err();
        assert!(
            e.contains("attempts applies to the slow faults only"),
            "{e}"
        );
        let e = Fault::parse("slow-gpu-pair:attempts=0").unwrap_err();
        assert!(e.contains("attempts must be at least 1"), "{e}");
        assert!(Fault::parse("slow-gpu-pair:attempts=-1").is_err());
    }

    #[test]
    fn same_seed_same_numbers() {
        let node = load_node("h100-sxm-8").unwrap();
        let mut a = SimBackend::new(node.clone(), vec![], 7).unwrap();
        let mut b = SimBackend::new(node.clone(), vec![], 7).unwrap();
        let mut c = SimBackend::new(node, vec![], 8).unwrap();
        let x = a.host_copy(3, HostDir::H2d, 1, 1, 10).unwrap();
        assert_eq!(x, b.host_copy(3, HostDir::H2d, 1, 1, 10).unwrap());
        assert_ne!(x, c.host_copy(3, HostDir::H2d, 1, 1, 10).unwrap());
    }

    #[test]
    fn bf16_training_runs_at_half_the_bf16_gemm_rate_and_needs_ampere() {
        use crate::suite::{Precision, TrainingCheck};
        let mut cfg: TrainingCheck = toml::from_str("steps = 10").unwrap();
        let node = load_node("h200-vm-1").unwrap();
        assert_eq!(node.gpu.compute_capability, Some((9, 0)));
        let run = |node: &SimNode, cfg: &TrainingCheck| {
            SimBackend::new(node.clone(), vec![], 1)
                .unwrap()
                .training(cfg)
        };
        let fp32 = run(&node, &cfg).unwrap();
        cfg.precision = Precision::Bf16;
        let bf16 = run(&node, &cfg).unwrap();
        assert_eq!(
            (fp32.precision, bf16.precision),
            (Precision::Fp32, Precision::Bf16)
        );
        // The anchor: 6 x 21.0M parameters x 8192 samples at 832.0 x 0.47 TFLOP/s, which is the
        // 2.65 ms the lent H200 took.
        let expect = 6.0 * 21_020_682.0 * 8192.0 / (832.0e12 * BF16_MLP_STEP_EFFICIENCY) * 1e3;
        assert!((expect / 2.65 - 1.0).abs() < 0.01, "{expect}");
        let med = crate::evidence::median(&bf16.step_ms);
        assert!(
            (med / expect - 1.0).abs() < 0.05,
            "{med} ms, expected {expect}"
        );
        let speedup = crate::evidence::median(&fp32.step_ms) / med;
        assert!((7.0..8.5).contains(&speedup), "{speedup}");
        // The same fp32 gradients are all-reduced.
        assert_eq!(bf16.gradient_bytes, fp32.gradient_bytes);
        // A V100 (sm_70) has no bf16 tensor cores: refused by name, as on real hardware.
        let mut volta = node.clone();
        volta.gpu.compute_capability = Some((7, 0));
        match run(&volta, &cfg) {
            Err(HwError::NotSupported(why)) => {
                assert!(why.contains("compute capability 7.0 (sm_70)"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        cfg.precision = Precision::Fp32;
        assert!(run(&volta, &cfg).is_ok());
        // A node description without a bf16 rate does not invent one.
        let mut unknown = node;
        unknown.perf.bf16_tflops = None;
        cfg.precision = Precision::Bf16;
        match run(&unknown, &cfg) {
            Err(HwError::NotSupported(why)) => assert!(why.contains("perf.bf16_tflops"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn out_of_range_fault_is_rejected() {
        let node = load_node("h200-vm-1").unwrap();
        assert!(SimBackend::new(
            node,
            vec![Fault::parse("slow-gpu-pair:gpu=0,peer=1").unwrap()],
            1
        )
        .is_err());
    }

    /// A 4-GPU PCIe box written as a real one is: irregular addresses, per-pair paths, and a
    /// figure per path class.
    fn pcie_box() -> SimNode {
        let mut node = load_node("l40s-pcie-4").unwrap();
        node.gpu.first_bus = None;
        node.gpu.bus_stride = None;
        node.gpu.bus_ids = [
            "0000:1B:00.0",
            "00000000:3d:00.0",
            "0000:89:00.0",
            "0000:b1:00.0",
        ]
        .map(String::from)
        .to_vec();
        node.gpu.numa_nodes = vec![0, 0, 1, 1];
        node.gpu.numa_cpus = vec!["0-31".into(), "32-63".into()];
        node.links.pcie_same_numa = "PXB".into();
        node.links.pcie_cross_numa = "SYS".into();
        node.links.pcie_paths = vec![crate::suite::PairPath {
            a: 3,
            b: 2,
            path: PciePath::Pix,
        }];
        node.perf.noise_pct = 0.0;
        node.perf.p2p_pcie_gbps_by_path = [(PciePath::Pix, 26.0), (PciePath::Sys, 19.0)].into();
        node.perf.p2p_pcie_bidir_gbps_by_path = [(PciePath::Pix, 50.0)].into();
        node.perf.p2p_latency_us_by_path = [(PciePath::Sys, 14.0)].into();
        node.validate().unwrap();
        node
    }

    #[test]
    fn a_real_pcie_topology_can_be_written() {
        let node = pcie_box();
        let mut b = SimBackend::new(node.clone(), vec![], 1).unwrap();
        let inv = b.inventory().unwrap();
        let ids: Vec<&str> = inv.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "0000:1b:00.0",
                "0000:3d:00.0",
                "0000:89:00.0",
                "0000:b1:00.0"
            ]
        );
        let path = |a: usize, b: usize| {
            inv.pairs
                .iter()
                .find(|p| (p.a, p.b) == (a, b))
                .and_then(|p| p.pcie_path.clone())
                .unwrap()
        };
        // Listed pair, same NUMA node, across NUMA nodes.
        assert_eq!(path(2, 3), "PIX");
        assert_eq!(path(0, 1), "PXB");
        assert_eq!(path(1, 2), "SYS");
        // Each class delivers its own figure; PXB is not listed and takes the single one.
        let mut read = |a: usize, c: usize, mode: P2pMode| {
            b.p2p_copy(a, c, mode, 1, 0, 3).unwrap().gbps.values[0]
        };
        assert_eq!(read(3, 2, P2pMode::Read), 26.0);
        assert_eq!(read(0, 1, P2pMode::Read), node.perf.p2p_pcie_gbps);
        assert_eq!(read(0, 3, P2pMode::Read), 19.0);
        assert_eq!(read(2, 3, P2pMode::Bidir), 50.0);
        assert_eq!(read(0, 3, P2pMode::Bidir), node.perf.p2p_pcie_bidir_gbps);
        let lat =
            |b: &mut SimBackend, x: usize, y: usize| b.p2p_latency(x, y, 3).unwrap().values[0];
        assert_eq!(lat(&mut b, 0, 2), 14.0);
        assert_eq!(lat(&mut b, 0, 1), node.perf.p2p_latency_us);
    }

    #[test]
    fn slower_path_classes_do_not_slow_a_healthy_collective_but_a_slow_pair_does() {
        let node = pcie_box();
        let healthy = SimBackend::new(node.clone(), vec![], 1).unwrap();
        let peak = node.perf.collective_busbw_gbps[&CollectiveOp::AllReduce];
        assert_eq!(healthy.coll_peak(CollectiveOp::AllReduce, false), peak);
        // A PIX pair at 60% of its 26 GB/s is still faster than SYS pairs, yet it is faulty.
        let slow = SimBackend::new(
            node,
            vec![Fault::parse("slow-gpu-pair:gpu=2,peer=3,factor=0.6").unwrap()],
            1,
        )
        .unwrap();
        let got = slow.coll_peak(CollectiveOp::AllReduce, false);
        assert!((got - peak * 0.6).abs() < 1e-9, "{got}");
    }

    #[test]
    fn bus_ids_are_checked() {
        let good = pcie_box();
        let check = |f: &dyn Fn(&mut SimNode)| {
            let mut n = good.clone();
            f(&mut n);
            n.validate().unwrap_err()
        };
        let (at, msg) = check(&|n| n.gpu.first_bus = Some(0x18));
        assert_eq!(
            (at.as_str(), msg.as_str()),
            (
                "gpu.bus_ids",
                "give bus_ids or first_bus and bus_stride, not both"
            )
        );
        let (at, msg) = check(&|n| n.gpu.bus_ids.truncate(3));
        assert_eq!(at, "gpu.bus_ids");
        assert!(msg.contains("lists 3 GPUs, gpu.count is 4"), "{msg}");
        for bad in [
            "0000:1b:00",
            "0000:1b:20.0",
            "0000:1b:00.8",
            "0000:1bb:00.0",
            "00:1b:00.0",
            "0000:1g:00.0",
            "+000:1b:00.0",
        ] {
            let (at, msg) = check(&|n| n.gpu.bus_ids[2] = bad.into());
            assert_eq!(at, "gpu.bus_ids[2]", "{bad}");
            assert!(msg.contains("is not a PCI address"), "{bad}: {msg}");
        }
        let (at, msg) = check(&|n| n.gpu.bus_ids[3] = "0000:1B:00.0".into());
        assert_eq!(at, "gpu.bus_ids[3]");
        assert!(
            msg.contains("GPU 3 has the address of GPU 0: 0000:1b:00.0"),
            "{msg}"
        );
        let (at, msg) = check(&|n| n.gpu.bus_ids.clear());
        assert_eq!(at, "gpu");
        assert!(
            msg.contains("bus_ids, or first_bus and bus_stride"),
            "{msg}"
        );
        let strided = |first: u32, stride: u32| {
            check(&|n| {
                n.gpu.bus_ids.clear();
                n.gpu.first_bus = Some(first);
                n.gpu.bus_stride = Some(stride);
            })
        };
        let (at, msg) = strided(0x100, 1);
        assert_eq!(at, "gpu.first_bus", "{msg}");
        assert!(msg.contains("first_bus is 0x100"), "{msg}");
        assert_eq!(strided(0x100, 0).0, "gpu.first_bus");
        assert_eq!(strided(0xfe, 1).0, "gpu.bus_stride");
        assert_eq!(strided(0x10, 0).0, "gpu.bus_stride");
    }
}
