//! The real node, read through NVML (and, for measurements, CUDA).
//!
//! Opening fails with a clear error, never a panic, on a machine without the NVIDIA driver or
//! without GPUs.

use super::cuda::{CudaMeasurements, CudaOptions};
use super::*;
use crate::error::HwError;
use crate::inventory::{normalize_bus_id, Gpu, Inventory, PcieLink};
use nvml_wrapper::Nvml;

pub struct RealBackend {
    nvml: Nvml,
    /// Measurements through CUDA and NCCL (started on first use).
    cuda: CudaMeasurements,
}

/// PCI bus ids in NVML's order, so measurements address the GPUs the inventory lists (CUDA
/// orders them differently). Empty when NVML cannot say.
fn nvml_bus_ids(nvml: &Nvml) -> Vec<String> {
    let n = nvml.device_count().unwrap_or(0);
    (0..n)
        .map(|i| {
            nvml.device_by_index(i)
                .and_then(|d| d.pci_info())
                .map(|p| p.bus_id)
        })
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_default()
}

/// Open the real node: load NVML and make sure there is at least one GPU.
pub fn open() -> Result<Box<dyn Backend>, HwError> {
    let nvml = Nvml::init().map_err(|e| HwError::Unavailable {
        what: "the NVIDIA driver".into(),
        detail: format!(
            "NVML could not be loaded ({e}); this machine has no NVIDIA driver or no GPU"
        ),
    })?;
    let n = nvml.device_count().map_err(|e| HwError::Call {
        call: "nvmlDeviceGetCount".into(),
        detail: e.to_string(),
    })?;
    if n == 0 {
        return Err(HwError::Unavailable {
            what: "a GPU".into(),
            detail: "the NVIDIA driver is loaded but reports no GPU".into(),
        });
    }
    let cuda = CudaMeasurements::new(CudaOptions {
        bus_ids: nvml_bus_ids(&nvml),
        ..Default::default()
    });
    Ok(Box::new(RealBackend { nvml, cuda }))
}

fn not_yet(what: &str) -> HwError {
    HwError::NotSupported(format!("{what} on real GPUs needs the CUDA measurement backend, which this build does not have yet"))
}

impl Backend for RealBackend {
    fn info(&self) -> BackendInfo {
        let mut info = BackendInfo {
            simulated: false,
            name: "nvml".into(),
            libraries: vec![LibraryInfo {
                name: "libnvidia-ml".into(),
                path: None,
                version: self.nvml.sys_nvml_version().ok(),
            }],
            nccl_version: None,
            nccl_env: vec![],
        };
        super::cuda::extend_info(&mut info);
        info
    }

    fn inventory(&mut self) -> Result<Inventory, HwError> {
        let call = |c: &str, e: nvml_wrapper::error::NvmlError| HwError::Call {
            call: c.into(),
            detail: e.to_string(),
        };
        let n = self
            .nvml
            .device_count()
            .map_err(|e| call("nvmlDeviceGetCount", e))?;
        let mut gpus = Vec::new();
        for i in 0..n {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(|e| call("nvmlDeviceGetHandleByIndex", e))?;
            gpus.push(Gpu {
                index: i as usize,
                name: d.name().unwrap_or_default(),
                uuid: d.uuid().unwrap_or_default(),
                pci_bus_id: d
                    .pci_info()
                    .map(|p| normalize_bus_id(&p.bus_id))
                    .unwrap_or_default(),
                memory_bytes: d.memory_info().map(|m| m.total).unwrap_or(0),
                pcie: PcieLink {
                    gen_current: d.current_pcie_link_gen().ok(),
                    gen_max: d.max_pcie_link_gen().ok(),
                    width_current: d.current_pcie_link_width().ok(),
                    width_max: d.max_pcie_link_width().ok(),
                    replay_counter: d.pcie_replay_counter().ok().map(u64::from),
                },
                ecc_enabled: d.is_ecc_enabled().ok().map(|e| e.currently_enabled),
                ..Default::default()
            });
        }
        Ok(Inventory {
            hostname: hostname(),
            driver_version: self.nvml.sys_driver_version().ok(),
            cuda_driver_version: self
                .nvml
                .sys_cuda_driver_version()
                .ok()
                .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
            nvml_version: self.nvml.sys_nvml_version().ok(),
            gpus,
            ..Default::default()
        })
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
    fn training(&mut self, _: &TrainingCheck) -> Result<TrainingRun, HwError> {
        Err(not_yet("the training run"))
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}
