//! The real node, read through NVML, CUDA's device list and the operating system (and, for
//! measurements, CUDA).
//!
//! Opening fails with a clear error, never a panic, on a machine without the NVIDIA driver or
//! without GPUs. Every query the platform does not answer becomes `None` in the inventory and a
//! line in [`Inventory::unavailable`].

mod links;
pub mod nvml;
pub mod order;
pub mod watchdog;
pub mod xid;

use super::*;
use crate::backend::cuda::{CudaMeasurements, CudaOptions};
use crate::error::HwError;
use crate::inventory::{Gpu, GpuPair, Inventory, LostGpu};
use crate::platform::{self, NvmlVirt};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};
use std::path::Path;

pub struct RealBackend {
    /// NVML stays initialised for the life of the process: the event set borrows it.
    nvml: &'static Nvml,
    /// NVML devices in CUDA ordinal order.
    devices: Vec<Device<'static>>,
    /// What ordering the devices taught us (e.g. "gpu order: by PCI bus id ...").
    order_notes: Vec<String>,
    /// GPUs NVML lists but could not hand out because they fell off the bus.
    lost_at_open: Vec<LostGpu>,
    /// CUDA's multicast support of each device, in the same order.
    multicast: Vec<Option<bool>>,
    /// CUDA's dma-buf support of each device, in the same order.
    dmabuf: Vec<Option<bool>>,
    /// XID critical-error events, registered when the backend opened.
    events: Option<EventSet<'static>>,
    /// Which GPUs (by index) the event set listens to.
    event_gpus: Vec<bool>,
    event_notes: Vec<String>,
    /// XIDs collected from events so far.
    nvml_xids: Vec<xid::XidReport>,
    /// How many of `nvml_xids` an inventory or [`Backend::xids_since`] has told.
    xids_told: usize,
    /// When the kernel log was last read for XIDs (seconds since boot): later lines are new.
    log_read_at: Option<f64>,
    /// The GPUs of the last inventory (index, UUID, bus id): what XIDs read later name.
    xid_gpus: Vec<Gpu>,
    /// Measurements through CUDA and NCCL (started on first use).
    cuda: CudaMeasurements,
    /// The NCCL settings in effect, read when the backend opened: once NCCL has started it has
    /// copied its configuration files' settings into the environment, where they would read
    /// as the user's own.
    nccl_settings: Vec<crate::backend::NcclSetting>,
}

/// Open the real node: load NVML, order its GPUs as CUDA numbers them, and listen for XIDs.
pub fn open() -> Result<Box<dyn Backend>, HwError> {
    let _deadline =
        watchdog::Watchdog::start("opening the node through NVML", watchdog::NVML_LIMIT);
    let nvml = Nvml::init().map_err(init_error)?;
    let n = nvml.device_count().map_err(|e| HwError::Call {
        call: "nvmlDeviceGetCount".into(),
        detail: nvml::why(&e),
    })?;
    if n == 0 {
        return Err(HwError::Unavailable {
            what: "a GPU".into(),
            detail: "the NVIDIA driver is loaded but reports no GPU".into(),
        });
    }
    let nvml: &'static Nvml = Box::leak(Box::new(nvml));
    let Ordered {
        devices,
        notes: order_notes,
        lost: lost_at_open,
        multicast,
        dmabuf,
    } = ordered_devices(nvml, n)?;
    let (events, event_notes, event_gpus) = register_xid_events(nvml, &devices);
    // Measurements address GPUs by the inventory's index (CUDA order): give CUDA their bus ids.
    let bus_ids = devices
        .iter()
        .map(|d| d.pci_info().map(|p| p.bus_id))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_default();
    let cuda = CudaMeasurements::new(CudaOptions {
        bus_ids,
        ..Default::default()
    });
    Ok(Box::new(RealBackend {
        nvml,
        devices,
        order_notes,
        lost_at_open,
        multicast,
        dmabuf,
        events,
        event_gpus,
        event_notes,
        nvml_xids: Vec::new(),
        xids_told: 0,
        log_read_at: None,
        xid_gpus: Vec::new(),
        cuda,
        nccl_settings: crate::backend::cuda::nccl_settings(),
    }))
}

/// One clear sentence for each way NVML can fail to start.
fn init_error(e: NvmlError) -> HwError {
    let detail = match &e {
        NvmlError::LibloadingError(l) => format!("libnvidia-ml.so.1 could not be loaded ({l})"),
        NvmlError::LibraryNotFound => "libnvidia-ml.so.1 could not be found".into(),
        NvmlError::DriverNotLoaded => {
            "NVML is installed but the NVIDIA kernel driver is not loaded".into()
        }
        NvmlError::LibRmVersionMismatch => {
            "NVML and the NVIDIA kernel driver are different versions (reboot or reload the driver)"
                .into()
        }
        NvmlError::NoPermission => "NVML refused access to the GPUs (no permission)".into(),
        other => format!("NVML did not start ({})", other.to_string().to_lowercase()),
    };
    HwError::Unavailable {
        what: "the NVIDIA driver".into(),
        detail,
    }
}

/// NVML's devices in CUDA ordinal order (honouring CUDA_VISIBLE_DEVICES), joined by UUID or
/// bus id; by bus id when CUDA is not there. A GPU NVML lists but cannot hand out because it
/// fell off the bus is returned apart, for the health check to fail; the others are tested.
#[allow(clippy::type_complexity)]
/// NVML's devices in CUDA order, with what ordering them taught.
struct Ordered {
    devices: Vec<Device<'static>>,
    notes: Vec<String>,
    lost: Vec<LostGpu>,
    /// CUDA's multicast support of each device, aligned with `devices`.
    multicast: Vec<Option<bool>>,
    /// CUDA's dma-buf support of each device, aligned with `devices`.
    dmabuf: Vec<Option<bool>>,
}

fn ordered_devices(nvml: &'static Nvml, n: u32) -> Result<Ordered, HwError> {
    let mut all = Vec::new();
    let mut ids = Vec::new();
    let mut lost = Vec::new();
    let mut unnamed = Vec::new();
    for i in 0..n {
        let d = match nvml.device_by_index(i) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => {
                lost.push(LostGpu::unlisted(i));
                // Keeps NVML indices and `ids` aligned; never matches a CUDA device.
                ids.push(order::NvmlId {
                    uuid: String::new(),
                    bus_id: String::new(),
                });
                all.push(None);
                continue;
            }
            Err(e) => {
                return Err(HwError::Call {
                    call: format!("nvmlDeviceGetHandleByIndex({i})"),
                    detail: nvml::why(&e),
                })
            }
        };
        let uuid = d.uuid();
        let bus_id = d
            .pci_info()
            .map(|p| crate::inventory::normalize_bus_id(&p.bus_id));
        if let Some(l) = lost_after_handle(i, &uuid, &bus_id) {
            // Without a UUID or a bus id it cannot be ordered; it must not vanish either.
            lost.push(l);
            ids.push(order::NvmlId {
                uuid: String::new(),
                bus_id: String::new(),
            });
            all.push(None);
            continue;
        }
        if let (Err(u), Err(b)) = (&uuid, &bus_id) {
            unnamed.push(format!(
                "NVML GPU {i} answers neither its UUID ({}) nor its bus id ({}): left out",
                nvml::why(u),
                nvml::why(b)
            ));
        }
        ids.push(order::NvmlId {
            uuid: uuid.unwrap_or_default(),
            bus_id: bus_id.unwrap_or_default(),
        });
        all.push(Some(d));
    }
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let o = order::order(&ids, &order::cuda_view(), visible.as_deref());
    let none = std::iter::repeat(&None);
    type Attrs = (Option<bool>, Option<bool>);
    let (devices, attrs): (Vec<Device<'static>>, Vec<Attrs>) = o
        .nvml_indices
        .iter()
        .zip(o.multicast.iter().chain(none.clone()))
        .zip(o.dmabuf.iter().chain(none))
        .filter_map(|((&j, &m), &b)| all.get_mut(j).and_then(Option::take).map(|d| (d, (m, b))))
        .unzip();
    let (multicast, dmabuf) = attrs.into_iter().unzip();
    if lost.len() == n as usize {
        return Err(HwError::Unavailable {
            what: "a GPU".into(),
            detail: format!(
                "all {n} GPUs NVML lists fell off the bus (NVML_ERROR_GPU_IS_LOST): the node \
                 needs a GPU reset or a repair"
            ),
        });
    }
    if devices.is_empty() {
        return Err(HwError::Unavailable {
            what: "a GPU".into(),
            detail: format!(
                "CUDA sees none of the {n} GPUs NVML lists (CUDA_VISIBLE_DEVICES={})",
                visible.as_deref().unwrap_or("unset")
            ),
        });
    }
    Ok(Ordered {
        devices,
        notes: [o.notes, unnamed].concat(),
        lost,
        multicast,
        dmabuf,
    })
}

/// A GPU NVML handed out that answers neither its UUID nor its bus id because it fell off the
/// bus (NVML_ERROR_GPU_IS_LOST): lost, as if NVML had not handed it out.
fn lost_after_handle(
    nvml_index: u32,
    uuid: &Result<String, NvmlError>,
    bus_id: &Result<String, NvmlError>,
) -> Option<LostGpu> {
    let lost = |r: &Result<String, NvmlError>| matches!(r, Err(NvmlError::GpuLost));
    if uuid.is_ok() || bus_id.is_ok() || !(lost(uuid) || lost(bus_id)) {
        return None;
    }
    Some(LostGpu {
        index: None,
        nvml_index: Some(nvml_index),
        pci_bus_id: None,
        detail: format!(
            "nvml{}({nvml_index})",
            if lost(uuid) {
                "DeviceGetUUID"
            } else {
                "DeviceGetPciInfo"
            }
        ),
    })
}

/// An NVML event set for XID critical errors on every GPU that supports it, and which GPUs
/// it listens to.
fn register_xid_events(
    nvml: &'static Nvml,
    devices: &[Device<'static>],
) -> (Option<EventSet<'static>>, Vec<String>, Vec<bool>) {
    let mut notes = Vec::new();
    let mut listening = vec![false; devices.len()];
    let mut set = match nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => {
            return (
                None,
                vec![format!("xid events: {}", nvml::why(&e))],
                listening,
            )
        }
    };
    for (i, d) in devices.iter().enumerate() {
        let supported = d
            .supported_event_types()
            .map(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !matches!(supported, Ok(true)) {
            notes.push(format!("gpu{i} xid events: not supported"));
            continue;
        }
        set = match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(s) => s,
            Err(e) => {
                // The failed call released the set: no events from any GPU.
                notes.push(format!("xid events: {}", nvml::why(&e.error)));
                return (None, notes, vec![false; devices.len()]);
            }
        };
        listening[i] = true;
    }
    (Some(set), notes, listening)
}

impl RealBackend {
    /// Drain the XID events that arrived since the last call, waiting at most 1 ms.
    fn collect_events(&mut self) {
        let Some(set) = &self.events else { return };
        // The bound guards against a storm of events. 1 ms, not 0: nvml.h defines the timeout
        // only as "not longer than", and 0 is a value some C APIs read as "no limit".
        for _ in 0..10_000 {
            match set.wait(1) {
                Ok(ev) => {
                    let Some(code) = ev.event_data.and_then(|x| match x {
                        nvml_wrapper::enums::event::XidError::Value(v) => u32::try_from(v).ok(),
                        nvml_wrapper::enums::event::XidError::Unknown => None,
                    }) else {
                        continue;
                    };
                    self.nvml_xids.push(xid::XidReport {
                        bus_id: None,
                        uuid: ev.device.uuid().ok(),
                        code,
                        source: "nvml event",
                        text: format!("nvml critical xid event {code}"),
                        since_boot_s: None,
                    });
                }
                Err(NvmlError::Timeout) => break,
                Err(e) => {
                    self.event_notes
                        .push(format!("xid events: waiting failed ({})", nvml::why(&e)));
                    self.events = None;
                    break;
                }
            }
        }
    }

    fn read_inventory(&mut self) -> Inventory {
        let root = Path::new("/");
        let mut notes = self.order_notes.clone();
        let mut gpus = Vec::new();
        let mut lost = self.lost_at_open.clone();
        for (i, d) in self.devices.iter().enumerate() {
            let mut g = nvml::read_gpu(i, d, self.nvml, root, &mut notes, &mut lost);
            let links = nvml::read_links(self.nvml, d, &format!("gpu{i}"), &mut notes);
            g.nvlinks = links.links;
            if links.state_unread {
                g.unavailable.push(crate::inventory::Reading::NvlinkState);
            }
            g.nvls = crate::inventory::Nvls {
                multicast: self.multicast.get(i).copied().flatten(),
                fabric: nvml::fabric_state(self.nvml, d, &format!("gpu{i}"), &mut notes),
            };
            gpus.push(g);
        }
        links::attach_remote_gpus(&mut gpus);
        self.read_pcie_under_load(&mut gpus, &mut notes);
        let pairs = self.read_pairs(&gpus, &mut notes);
        // The events are drained here, after the GPUs were read and just before the kernel log
        // is: an XID raised while the GPUs were read is this inventory's, and is not told by
        // both sources (the log's line here, the event after the first check).
        self.collect_events();
        let mut reports = self.nvml_xids.clone();
        self.xids_told = self.nvml_xids.len();
        self.log_read_at = None;
        self.xid_gpus = gpus
            .iter()
            .map(|g| Gpu {
                index: g.index,
                uuid: g.uuid.clone(),
                pci_bus_id: g.pci_bus_id.clone(),
                ..Default::default()
            })
            .collect();
        let kernel_log = match xid::read_kernel_log() {
            Ok(text) => {
                reports.extend(xid::parse_kernel_log(&text));
                // Later lines are new: a place in the log's own time, not the system clock's
                // (the log's drifts from it with uptime).
                self.log_read_at = xid::last_timestamp(&text);
                true
            }
            Err(e) => {
                notes.push(format!("kernel log xids: not readable ({e})"));
                false
            }
        };
        // No event set listening to a GPU and no kernel log: no XID of it could have been seen.
        // Events alone see the run, not the look-back before it.
        for (i, g) in gpus.iter_mut().enumerate() {
            let events = self.events.is_some() && self.event_gpus.get(i) == Some(&true);
            if !kernel_log {
                g.unavailable.push(match events {
                    true => crate::inventory::Reading::XidHistory,
                    false => crate::inventory::Reading::Xids,
                });
            }
        }
        notes.extend(xid::attach(&mut gpus, &reports, xid::since_boot_now()));
        notes.extend(self.event_notes.iter().cloned());
        let buses: Vec<String> = gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
        let (virtualization, vnotes) = platform::virtualization(
            root,
            &platform::hypervisor::read_cpuid(),
            self.nvml_virt(&mut notes),
            &buses,
        );
        notes.extend(vnotes);
        let fabric = self.read_fabric(&gpus);
        Inventory {
            hostname: hostname(),
            driver_version: self.ask_sys(
                "driver version",
                self.nvml.sys_driver_version(),
                &mut notes,
            ),
            cuda_driver_version: self
                .ask_sys(
                    "cuda driver version",
                    self.nvml.sys_cuda_driver_version(),
                    &mut notes,
                )
                .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
            nvml_version: self.ask_sys("nvml version", self.nvml.sys_nvml_version(), &mut notes),
            nvswitches: links::count_nvswitches(&gpus),
            gpus,
            pairs,
            virtualization,
            unavailable: notes,
            lost_gpus: lost,
            mps: platform::mps::found_at_start(),
            fabric: Some(fabric),
        }
    }

    /// The NICs from sysfs, and dma-buf support from CUDA: the node's when every GPU has it,
    /// unknown when one was not read. Every sysfs file is read under the NIC reader's deadline
    /// ([`platform::nic::READ_LIMIT`]): a NIC whose firmware hangs leaves `no_answer` set (the
    /// network check's error) and a blocked thread behind, instead of hanging the run.
    fn read_fabric(&self, gpus: &[Gpu]) -> crate::network::Fabric {
        let at: Vec<platform::nic::GpuAt> = gpus
            .iter()
            .map(|g| platform::nic::GpuAt {
                index: g.index,
                pci_bus_id: g.pci_bus_id.clone(),
                numa_node: g.numa_node,
            })
            .collect();
        let mut f = platform::nic::read(Path::new("/"), &at);
        let each: Vec<Option<bool>> = (0..gpus.len())
            .map(|i| self.dmabuf.get(i).copied().flatten())
            .collect();
        f.gdr.dmabuf = if each.contains(&Some(false)) {
            Some(false)
        } else if !each.is_empty() && each.iter().all(|d| *d == Some(true)) {
            Some(true)
        } else {
            None
        };
        f
    }

    /// Reads again, while host-to-device copies run on that GPU, every PCIe link that was below
    /// its maximum at rest: an idle GPU lowers its link to save power, and only a reading under
    /// load tells that apart from a link that trained low.
    fn read_pcie_under_load(&mut self, gpus: &mut [Gpu], notes: &mut Vec<String>) {
        for (i, g) in gpus.iter_mut().enumerate() {
            if !g.pcie.below_max_at_rest() {
                continue;
            }
            let (Some(d), Some(max)) = (self.devices.get(i), g.pcie.gen_max.zip(g.pcie.width_max))
            else {
                continue;
            };
            match pcie_under_load(d, &mut self.cuda, i, max) {
                Ok((gen, width)) => {
                    g.pcie.gen_loaded = Some(gen);
                    g.pcie.width_loaded = Some(width);
                }
                Err(e) => notes.push(format!("gpu{i} pcie link under load: not read ({e})")),
            }
        }
    }

    fn ask_sys<T>(
        &self,
        what: &str,
        r: Result<T, NvmlError>,
        notes: &mut Vec<String>,
    ) -> Option<T> {
        nvml::Asker::new("node", notes).ask(what, r)
    }

    fn read_pairs(&self, gpus: &[crate::inventory::Gpu], notes: &mut Vec<String>) -> Vec<GpuPair> {
        let mut pairs = Vec::new();
        for a in 0..self.devices.len() {
            for b in (a + 1)..self.devices.len() {
                let who = format!("gpu{a}-gpu{b}");
                let (p2p, pcie_path) =
                    nvml::read_pair(self.nvml, &self.devices[a], &self.devices[b], &who, notes);
                pairs.push(GpuPair {
                    a,
                    b,
                    nvlinks: links::pair_nvlinks(gpus, a, b),
                    pcie_path,
                    p2p,
                });
            }
        }
        pairs
    }

    /// NVML's virtualization mode, from the first GPU that answers; a note if GPUs disagree.
    fn nvml_virt(&self, notes: &mut Vec<String>) -> Option<NvmlVirt> {
        let modes: Vec<NvmlVirt> = self
            .devices
            .iter()
            .filter_map(|d| d.virtualization_mode().ok().map(nvml::virt_mode))
            .collect();
        if modes.len() < self.devices.len() {
            notes.push("nvml virtualization mode: not reported by every GPU".into());
        }
        if modes.windows(2).any(|w| w[0] != w[1]) {
            notes.push(format!(
                "nvml virtualization mode differs between GPUs: {modes:?}"
            ));
        }
        modes.first().copied()
    }
}

impl Backend for RealBackend {
    fn nccl_settings(&self) -> Vec<crate::backend::NcclSetting> {
        self.nccl_settings.clone()
    }

    fn info(&self) -> BackendInfo {
        let mut info = BackendInfo {
            simulated: false,
            name: "nvml".into(),
            libraries: vec![LibraryInfo {
                name: "libnvidia-ml".into(),
                // The file the loader mapped when NVML was opened (the evidence of the first
                // H200 run said "not found" for the one library that was loaded for sure).
                path: crate::backend::cuda::libs::mapped_file("libnvidia-ml.so")
                    .map(|p| p.display().to_string()),
                version: self.nvml.sys_nvml_version().ok(),
            }],
            nccl_version: None,
            nccl_env: vec![],
        };
        crate::backend::cuda::extend_info(&mut info, &self.nccl_settings);
        info
    }

    fn fabric(&mut self, gpus: &[Gpu]) -> Result<Option<crate::network::Fabric>, HwError> {
        Ok(Some(self.read_fabric(gpus)))
    }

    fn fabric_supported(&mut self) -> Result<(), HwError> {
        self.cuda.fabric_supported()
    }

    fn fabric_id(&mut self) -> Result<Vec<u8>, HwError> {
        self.cuda.fabric_id()
    }

    fn fabric_collective(
        &mut self,
        comm: &crate::backend::FabricComm,
        ops: &[CollectiveOp],
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Vec<CollectiveSample>>, HwError> {
        self.cuda.fabric_collective(comm, ops, sizes, warmup, iters)
    }

    fn inventory(&mut self) -> Result<Inventory, HwError> {
        let _deadline =
            watchdog::Watchdog::start("reading the inventory through NVML", watchdog::NVML_LIMIT);
        Ok(self.read_inventory())
    }

    fn xids_since(&mut self) -> Result<Vec<Option<Vec<crate::inventory::XidEvent>>>, HwError> {
        if self.xid_gpus.is_empty() {
            return Err(HwError::NotSupported(
                "XIDs are read since an inventory, and none was read".into(),
            ));
        }
        let _deadline =
            watchdog::Watchdog::start("reading XID events through NVML", watchdog::NVML_LIMIT);
        let now = xid::since_boot_now();
        self.collect_events();
        let mut reports: Vec<xid::XidReport> = self
            .nvml_xids
            .get(self.xids_told..)
            .unwrap_or_default()
            .to_vec();
        self.xids_told = self.nvml_xids.len();
        // Kernel-log lines logged after the last line read before; a line without a time
        // cannot be told apart from one seen before, and is left to the next run's look-back.
        let log = xid::read_kernel_log().ok();
        if let Some(text) = &log {
            let (new, last) = xid::logged_after(text, self.log_read_at);
            reports.extend(new);
            self.log_read_at = last;
        }
        let mut gpus = self.xid_gpus.clone();
        let _ = xid::attach(&mut gpus, &reports, now);
        Ok(gpus
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let events = self.events.is_some() && self.event_gpus.get(i) == Some(&true);
                (events || log.is_some()).then_some(g.xids)
            })
            .collect())
    }

    fn error_counts(&mut self) -> Result<Vec<Option<crate::inventory::ErrorCounts>>, HwError> {
        let _deadline = watchdog::Watchdog::start(
            "reading the GPUs' error counters through NVML",
            watchdog::NVML_LIMIT,
        );
        Ok(self
            .devices
            .iter()
            .map(|d| Some(nvml::read_error_counts(self.nvml, d)))
            .collect())
    }

    fn gpu_processes(&mut self) -> Result<Vec<Option<Vec<crate::inventory::GpuProcess>>>, HwError> {
        let _deadline = watchdog::Watchdog::start(
            "reading the GPUs' processes through NVML",
            watchdog::NVML_LIMIT,
        );
        // The same query as the inventory's; why a list was not read is the inventory's to say.
        let mut notes = Vec::new();
        let mut out = Vec::with_capacity(self.devices.len());
        // nodecert's own children (the measurement without NVLS) are not another job.
        let ours = crate::backend::no_nvls::live_children();
        for (i, d) in self.devices.iter().enumerate() {
            let mut q = nvml::Asker::new(format!("GPU {i}"), &mut notes);
            let list = nvml::processes(self.nvml, d, &mut q);
            out.push(list.map(|l| l.into_iter().filter(|p| !ours.contains(&p.pid)).collect()));
        }
        Ok(out)
    }

    fn host_copy(
        &mut self,
        gpu: usize,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        self.cuda.host_copy(gpu, dir, bytes, warmup, iters)
    }
    fn host_copy_all(
        &mut self,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Samples>, HwError> {
        self.cuda.host_copy_all(dir, bytes, warmup, iters)
    }
    fn device_copy(
        &mut self,
        gpu: usize,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        self.cuda.device_copy(gpu, bytes, warmup, iters)
    }
    fn p2p_copy(
        &mut self,
        src: usize,
        dst: usize,
        mode: P2pMode,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<P2pSample, HwError> {
        self.cuda.p2p_copy(src, dst, mode, bytes, warmup, iters)
    }
    fn p2p_latency(&mut self, src: usize, dst: usize, iters: u32) -> Result<Samples, HwError> {
        self.cuda.p2p_latency(src, dst, iters)
    }
    fn collective(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<CollectiveSample, HwError> {
        self.cuda.collective(op, bytes, warmup, iters)
    }
    fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<CollectiveSample>, HwError> {
        self.cuda.collective_no_nvls(op, sizes, warmup, iters)
    }
    fn gemm(
        &mut self,
        gpu: usize,
        precision: crate::suite::GemmPrecision,
        n: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<crate::backend::GemmSample, HwError> {
        self.cuda.gemm(gpu, precision, n, warmup, iters)
    }
    fn sustained_gemm(
        &mut self,
        precision: crate::suite::GemmPrecision,
        n: u64,
        seconds: f64,
        sample_ms: u32,
    ) -> Result<Vec<crate::backend::SustainedRun>, HwError> {
        use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
        use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
        let devices = &self.devices;
        let cuda = &mut self.cuda;
        let limits: Vec<Option<f64>> = devices
            .iter()
            .map(|d| {
                d.enforced_power_limit()
                    .ok()
                    .map(|mw| f64::from(mw) / 1000.0)
            })
            .collect();
        let stop = AtomicBool::new(false);
        // Set by the GEMMs: the GPUs are read only while they are under load, not while the
        // operands are uploaded and cuBLAS warmed, nor while the products are read back and
        // checked (seconds a GPU), which would dilute what the GPU does under load.
        let load = std::sync::Arc::new(AtomicU8::new(crate::backend::cuda::PREPARING));
        let period = std::time::Duration::from_millis(u64::from(sample_ms));
        std::thread::scope(|s| {
            let stop = &stop;
            let state = load.clone();
            let sampler = s.spawn(move || {
                let over = || {
                    stop.load(Ordering::Relaxed)
                        || state.load(Ordering::Relaxed) == crate::backend::cuda::LOAD_DONE
                };
                while state.load(Ordering::Relaxed) == crate::backend::cuda::PREPARING && !over() {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                let start = std::time::Instant::now();
                let mut out: Vec<Vec<crate::backend::LoadSample>> = vec![Vec::new(); devices.len()];
                while !over() {
                    let t_s = start.elapsed().as_secs_f64();
                    for (d, o) in devices.iter().zip(out.iter_mut()) {
                        o.push(crate::backend::LoadSample {
                            t_s,
                            sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                            power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                            temperature_c: d
                                .temperature(TemperatureSensor::Gpu)
                                .ok()
                                .map(f64::from),
                            throttle: d.current_throttle_reasons().ok().map(nvml::throttle_names),
                        });
                    }
                    // Sleep in short steps, so that the end of the load ends the sampling.
                    let next = start + period.mul_f64((t_s / period.as_secs_f64()).floor() + 1.0);
                    while !over() && std::time::Instant::now() < next {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
                out
            });
            // Whatever happens to the GEMMs (an error, a panic), the sampler is told to stop,
            // so that the scope's join cannot wait for ever.
            struct StopOnDrop<'a>(&'a AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let guard = StopOnDrop(stop);
            let runs = cuda.sustained_gemm(precision, n, seconds, sample_ms, load);
            drop(guard);
            let samples = sampler.join().map_err(|_| HwError::Call {
                call: "reading the GPUs under load".into(),
                detail: "the NVML sampling thread panicked".into(),
            })?;
            let runs = runs?;
            if runs.len() != samples.len() {
                return Err(HwError::Call {
                    call: "sustained GEMMs".into(),
                    detail: format!("{} GPUs loaded, {} read by NVML", runs.len(), samples.len()),
                });
            }
            Ok(runs
                .into_iter()
                .zip(samples)
                .zip(limits)
                .map(
                    |(((tflops, check), samples), power_limit_w)| crate::backend::SustainedRun {
                        tflops,
                        samples,
                        power_limit_w,
                        elements_checked: check.checked,
                        wrong_elements: check.wrong,
                    },
                )
                .collect())
        })
    }
    fn training(&mut self, cfg: &TrainingCheck) -> Result<TrainingRun, HwError> {
        self.cuda.training(cfg)
    }
    fn training_method(
        &mut self,
        cfg: &TrainingCheck,
        p: crate::training::partition::Partition,
    ) -> Result<crate::backend::MethodRun, HwError> {
        self.cuda.training_method(cfg, p)
    }
}

/// How long host-to-device copies keep a GPU busy while its PCIe link is read, at most; the
/// reading stops early once the link is at its maximum. The window opens when the first batch of
/// copies has finished: that first call also opens the GPUs (cuInit, a context per GPU), which
/// can take longer than the window itself.
const PCIE_LOAD_WINDOW: std::time::Duration = std::time::Duration::from_millis(1000);

/// The highest PCIe generation and width NVML reports while host-to-device copies run on `gpu`.
fn pcie_under_load(
    d: &Device<'static>,
    cuda: &mut CudaMeasurements,
    gpu: usize,
    max: (u32, u32),
) -> Result<(u32, u32), HwError> {
    load_while_sampling(
        || cuda.host_copy(gpu, HostDir::H2d, 32 << 20, 0, 1).map(drop),
        || {
            d.current_pcie_link_gen()
                .ok()
                .zip(d.current_pcie_link_width().ok())
        },
        max,
        PCIE_LOAD_WINDOW,
    )
}

/// Run `copy` again and again while another thread polls `read` (generation, width): until the
/// link reads `max`, or until `window` has passed since the first `copy` returned. The highest
/// generation and width read.
fn load_while_sampling(
    mut copy: impl FnMut() -> Result<(), HwError>,
    read: impl Fn() -> Option<(u32, u32)> + Sync,
    max: (u32, u32),
    window: std::time::Duration,
) -> Result<(u32, u32), HwError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let at_max = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut best: Option<(u32, u32)> = None;
            while !stop.load(Ordering::Relaxed) {
                if let Some((g, w)) = read() {
                    let (bg, bw) = best.unwrap_or((0, 0));
                    best = Some((bg.max(g), bw.max(w)));
                    if g >= max.0 && w >= max.1 {
                        at_max.store(true, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            best
        });
        let mut opened: Option<std::time::Instant> = None;
        let mut copies = Ok(());
        while !at_max.load(Ordering::Relaxed) && opened.is_none_or(|t| t.elapsed() < window) {
            if let Err(e) = copy() {
                copies = Err(e);
                break;
            }
            opened.get_or_insert_with(std::time::Instant::now);
        }
        stop.store(true, Ordering::Relaxed);
        let best = sampler.join().ok().flatten();
        copies?;
        best.ok_or_else(|| HwError::Call {
            call: "nvmlDeviceGetCurrPcieLinkGeneration/Width".into(),
            detail: "no answer while the GPU was under load".into(),
        })
    })
}

pub fn hostname() -> String {
    use crate::platform::hypervisor::read_trimmed;
    read_trimmed(std::path::Path::new("/proc/sys/kernel/hostname"))
        .or_else(|| read_trimmed(std::path::Path::new("/etc/hostname")))
        .unwrap_or_else(|| "unknown-host".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn the_link_is_loaded_for_the_whole_window_after_the_gpus_open() {
        // The first call opens the GPUs and takes longer than the window: the copies must go on
        // for a window after it, not stop after that single call.
        let calls = AtomicU32::new(0);
        let t0 = Instant::now();
        let r = load_while_sampling(
            || {
                let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
                std::thread::sleep(Duration::from_millis(if first { 300 } else { 5 }));
                Ok(())
            },
            || Some((3, 8)),
            (4, 16),
            Duration::from_millis(100),
        );
        assert_eq!(r.unwrap(), (3, 8));
        assert!(calls.load(Ordering::SeqCst) >= 5, "{calls:?}");
        assert!(
            t0.elapsed() >= Duration::from_millis(400),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn loading_stops_once_the_link_reads_its_maximum_or_a_copy_fails() {
        let t0 = Instant::now();
        let r = load_while_sampling(
            || {
                std::thread::sleep(Duration::from_millis(5));
                Ok(())
            },
            || Some((5, 16)),
            (5, 16),
            Duration::from_secs(30),
        );
        assert_eq!(r.unwrap(), (5, 16));
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());

        let calls = AtomicU32::new(0);
        let r = load_while_sampling(
            || {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(HwError::Call {
                    call: "cuMemAlloc".into(),
                    detail: "out of memory".into(),
                })
            },
            || Some((3, 16)),
            (5, 16),
            Duration::from_secs(30),
        );
        assert_eq!(
            r.unwrap_err().to_string(),
            "cuMemAlloc failed: out of memory"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_gpu_lost_after_its_handle_is_lost_not_dropped() {
        let lost = Err(NvmlError::GpuLost);
        let l = lost_after_handle(6, &lost, &lost).expect("lost");
        assert_eq!(l.nvml_index, Some(6));
        assert_eq!(l.detail, "nvmlDeviceGetUUID(6)");
        let other = Err(NvmlError::NotSupported);
        assert_eq!(
            lost_after_handle(2, &other, &lost).map(|l| l.detail),
            Some("nvmlDeviceGetPciInfo(2)".into())
        );
        // One id is enough to order it: read_gpu then finds it lost, with its index.
        assert_eq!(
            lost_after_handle(6, &lost, &Ok("0000:9a:00.0".into())),
            None
        );
        assert_eq!(lost_after_handle(6, &Ok("GPU-1".into()), &lost), None);
        // Unreadable for another reason: not lost (the order notes say it is left out).
        assert_eq!(lost_after_handle(6, &other, &other), None);
    }

    #[test]
    fn a_link_nvml_never_answers_for_is_an_error() {
        let r = load_while_sampling(|| Ok(()), || None, (5, 16), Duration::from_millis(20));
        assert!(r.unwrap_err().to_string().contains("no answer"));
    }
}
