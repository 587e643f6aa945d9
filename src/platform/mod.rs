//! What the operating system says about the node: hypervisor witnesses, IOMMU groups, PCIe ACS
//! on the bridges above the GPUs, and sysfs facts about each GPU. Nothing here needs a GPU.
//!
//! Every reader takes the root of the file tree ("/" on a real node), so tests can point it at a
//! sample tree in a temp dir.

pub mod cuda_env;
pub mod hypervisor;
pub mod mps;
pub mod nic;
pub mod numa;
pub mod pci;

#[cfg(test)]
mod tests;

use crate::inventory::{VirtMode, Virtualization, Witness};
use hypervisor::Cpuid;
use std::path::Path;

/// NVML's virtualization mode of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmlVirt {
    /// No virtualization: bare metal, or a VM whose GPU the driver cannot tell apart.
    Bare,
    PassThrough,
    Vgpu,
    /// The GPU belongs to a hypervisor host that hands out vGPUs (this node is the host).
    HostVgpu,
    HostVsga,
}

impl NvmlVirt {
    fn label(self) -> &'static str {
        match self {
            NvmlVirt::Bare => "None (bare metal)",
            NvmlVirt::PassThrough => "PassThrough",
            NvmlVirt::Vgpu => "VGPU",
            NvmlVirt::HostVgpu => "HostVgpu",
            NvmlVirt::HostVsga => "HostVsga",
        }
    }
}

/// Everything consulted, before a decision.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub witnesses: Vec<Witness>,
    /// A witness says a hypervisor is present.
    pub hypervisor_present: bool,
    /// The best name for it.
    pub vendor: Option<String>,
    /// At least one source (other than NVML) could be read.
    pub any_read: bool,
}

impl Evidence {
    fn add(&mut self, source: &str, finding: impl Into<String>) {
        self.witnesses.push(Witness {
            source: source.into(),
            finding: finding.into(),
        });
    }

    fn found(&mut self, vendor: Option<String>) {
        self.hypervisor_present = true;
        if self.vendor.is_none() {
            self.vendor = vendor;
        }
    }
}

/// Read every hypervisor witness under `root`; `cpuid` comes from [`hypervisor::read_cpuid`]
/// on a real node. NVML's mode is added by [`decide`].
pub fn hypervisor_evidence(root: &Path, cpuid: &Cpuid) -> Evidence {
    let mut e = Evidence::default();
    cpuid_witness(&mut e, cpuid);
    match hypervisor::cpuinfo_flag(root) {
        hypervisor::CpuinfoFlag::Present => {
            e.any_read = true;
            e.add("cpuinfo hypervisor flag", "present");
            e.found(None);
        }
        hypervisor::CpuinfoFlag::Absent => {
            e.any_read = true;
            e.add("cpuinfo hypervisor flag", "absent");
        }
        hypervisor::CpuinfoFlag::NoFlagsLine => e.add(
            "cpuinfo hypervisor flag",
            "not available (no x86 flags line)",
        ),
        hypervisor::CpuinfoFlag::NotReadable => {
            e.add("cpuinfo hypervisor flag", "not available (not readable)")
        }
    }
    dmi_witnesses(&mut e, root);
    match hypervisor::sys_hypervisor_type(root) {
        Some(t) => {
            e.any_read = true;
            e.add("/sys/hypervisor/type", &t);
            e.found(Some(if t == "xen" { "Xen".into() } else { t }));
        }
        None => e.add("/sys/hypervisor/type", "absent"),
    }
    match hypervisor::device_tree_hypervisor(root) {
        Some(c) => {
            e.any_read = true;
            e.add("device tree hypervisor", c.join(", "));
            e.found(Some(hypervisor::device_tree_vendor(&c)));
        }
        None => e.add("device tree hypervisor", "absent"),
    }
    e
}

fn cpuid_witness(e: &mut Evidence, cpuid: &Cpuid) {
    match cpuid {
        Cpuid::NotAvailable => e.add("cpuid 0x40000000", "not available (not x86_64)"),
        Cpuid::NoHypervisor => {
            e.any_read = true;
            e.add("cpuid 0x40000000", "no hypervisor bit");
        }
        Cpuid::Vendor(sig) => {
            e.any_read = true;
            e.add("cpuid 0x40000000", sig);
            e.found(Some(hypervisor::cpuid_vendor_name(sig)));
        }
    }
}

fn dmi_witnesses(e: &mut Evidence, root: &Path) {
    let values: Vec<Option<String>> = hypervisor::DMI_FIELDS
        .iter()
        .map(|f| hypervisor::dmi(root, f))
        .collect();
    for (f, v) in hypervisor::DMI_FIELDS.iter().zip(&values) {
        e.add(&format!("dmi {f}"), v.as_deref().unwrap_or("absent"));
    }
    if values.iter().all(Option::is_none) {
        // No DMI tables at all: typical of a microVM such as Firecracker.
        if e.vendor.as_deref() == Some("KVM") {
            e.vendor = Some("KVM (microVM without DMI, e.g. Firecracker)".into());
        }
        return;
    }
    e.any_read = true;
    if let Some(v) = hypervisor::dmi_vm_vendor(values[0].as_deref(), values[1].as_deref()) {
        e.found(Some(v));
    }
}

/// A witness, as recorded in [`Virtualization::witnesses`], that says a hypervisor is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HypervisorWitness {
    /// The witness's source, e.g. "cpuid 0x40000000", "cpuinfo hypervisor flag", "dmi".
    pub source: String,
    /// The hypervisor it names; None when it only says that one is present (the cpuinfo flag).
    pub names: Option<String>,
}

/// The recorded witnesses that say a hypervisor is present, in the order they were consulted.
/// Reads the witnesses as [`hypervisor_evidence`] writes them (and as evidence files keep
/// them), so that a report can say which witnesses answered and what they said.
pub fn hypervisor_witnesses(witnesses: &[Witness]) -> Vec<HypervisorWitness> {
    let said = |source: &str| {
        witnesses
            .iter()
            .find(|w| w.source == source)
            .map(|w| w.finding.as_str())
            .filter(|f| *f != "absent" && !f.starts_with("not available"))
    };
    let mut out = Vec::new();
    let mut push = |source: &str, names: Option<String>| {
        out.push(HypervisorWitness {
            source: source.into(),
            names,
        })
    };
    if let Some(sig) = said("cpuid 0x40000000").filter(|f| *f != "no hypervisor bit") {
        push("cpuid 0x40000000", Some(hypervisor::cpuid_vendor_name(sig)));
    }
    if said("cpuinfo hypervisor flag") == Some("present") {
        push("cpuinfo hypervisor flag", None);
    }
    if let Some(v) = hypervisor::dmi_vm_vendor(said("dmi sys_vendor"), said("dmi product_name")) {
        push("dmi", Some(v));
    }
    if let Some(t) = said("/sys/hypervisor/type") {
        push(
            "/sys/hypervisor/type",
            Some(if t == "xen" { "Xen".into() } else { t.into() }),
        );
    }
    if let Some(c) = said("device tree hypervisor") {
        let list: Vec<String> = c.split(", ").map(String::from).collect();
        push(
            "device tree hypervisor",
            Some(hypervisor::device_tree_vendor(&list)),
        );
    }
    out
}

/// The recorded witnesses that answered at all (neither "absent" nor "not available ...").
pub fn answering_witnesses(witnesses: &[Witness]) -> Vec<&Witness> {
    witnesses
        .iter()
        .filter(|w| w.finding != "absent" && !w.finding.starts_with("not available"))
        .collect()
}

/// Decide the mode: NVML first when it answers; a hypervisor with NVML saying "none" means
/// the GPU was passed through. Without NVML, a hypervisor leaves the mode unknown (passthrough
/// and vGPU cannot be told apart), and no hypervisor anywhere means bare metal.
pub fn decide(mut e: Evidence, nvml: Option<NvmlVirt>) -> Virtualization {
    e.witnesses.insert(
        0,
        Witness {
            source: "nvml virtualization mode".into(),
            finding: nvml.map_or("not available", NvmlVirt::label).into(),
        },
    );
    let mode = match nvml {
        Some(NvmlVirt::PassThrough) => VirtMode::Passthrough,
        Some(NvmlVirt::Vgpu) => VirtMode::Vgpu,
        Some(NvmlVirt::HostVgpu | NvmlVirt::HostVsga) => VirtMode::BareMetal,
        Some(NvmlVirt::Bare) if e.hypervisor_present => VirtMode::Passthrough,
        Some(NvmlVirt::Bare) => VirtMode::BareMetal,
        None if e.hypervisor_present || !e.any_read => VirtMode::Unknown,
        None => VirtMode::BareMetal,
    };
    let hypervisor = match mode {
        VirtMode::BareMetal => None,
        _ if e.hypervisor_present => e.vendor.or(Some("unidentified hypervisor".into())),
        _ => None,
    };
    Virtualization {
        mode,
        hypervisor,
        witnesses: e.witnesses,
        iommu_groups: None,
        acs_enabled_bridges: vec![],
        acs_unknown_bridges: vec![],
    }
}

/// The whole virtualization picture of a node: witnesses under `root`, NVML's mode, IOMMU
/// groups and, on bare metal, ACS on the bridges above `gpu_bus_ids`. Returns it with notes for
/// [`crate::inventory::Inventory::unavailable`].
pub fn virtualization(
    root: &Path,
    cpuid: &Cpuid,
    nvml: Option<NvmlVirt>,
    gpu_bus_ids: &[String],
) -> (Virtualization, Vec<String>) {
    let mut v = decide(hypervisor_evidence(root, cpuid), nvml);
    let mut notes = Vec::new();
    v.iommu_groups = pci::iommu_groups(root);
    if v.iommu_groups.is_none() {
        notes.push("iommu groups: /sys/kernel not readable".into());
    }
    if v.mode == VirtMode::BareMetal {
        let (bridges, unread) = pci::acs_redirecting_bridges(root, gpu_bus_ids);
        v.acs_enabled_bridges = bridges;
        notes.extend(
            unread.iter().map(|b| {
                format!("bridge {b} acs: extended config space not readable (needs root)")
            }),
        );
        v.acs_unknown_bridges = unread;
    }
    (v, notes)
}
