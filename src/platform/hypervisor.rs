//! Witnesses of a hypervisor: the cpuinfo flag, CPUID leaf 0x40000000, DMI strings,
//! /sys/hypervisor and the Arm device tree. Every reader takes the root of the file tree, so
//! tests can point it at a sample tree; the real call uses "/".

use std::path::Path;

/// What CPUID said about a hypervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cpuid {
    /// Not an x86_64 machine: there is no CPUID.
    NotAvailable,
    /// CPUID.1:ECX bit 31 (hypervisor present) is clear.
    NoHypervisor,
    /// The 12-byte vendor signature of leaf 0x40000000, e.g. "KVMKVMKVM".
    Vendor(String),
}

/// Read CPUID on this machine.
#[cfg(target_arch = "x86_64")]
pub fn read_cpuid() -> Cpuid {
    use std::arch::x86_64::__cpuid;
    // Safety: CPUID exists on every x86_64 CPU; leaf 1 is always valid, and leaf 0x40000000 is
    // read only when the hypervisor bit says a hypervisor defines it.
    #[allow(unused_unsafe)]
    let leaf1 = unsafe { __cpuid(1) };
    if leaf1.ecx & (1 << 31) == 0 {
        return Cpuid::NoHypervisor;
    }
    #[allow(unused_unsafe)]
    let r = unsafe { __cpuid(0x4000_0000) };
    let mut sig = Vec::with_capacity(12);
    for reg in [r.ebx, r.ecx, r.edx] {
        sig.extend_from_slice(&reg.to_le_bytes());
    }
    Cpuid::Vendor(signature_text(&sig))
}

#[cfg(not(target_arch = "x86_64"))]
pub fn read_cpuid() -> Cpuid {
    Cpuid::NotAvailable
}

/// The signature as text, without NULs and padding.
pub fn signature_text(sig: &[u8]) -> String {
    String::from_utf8_lossy(sig)
        .trim_matches(|c: char| c == '\0' || c.is_whitespace())
        .replace('\0', "")
}

/// The hypervisor a CPUID signature names.
pub fn cpuid_vendor_name(sig: &str) -> String {
    let known = [
        ("KVMKVMKVM", "KVM"),
        ("Microsoft Hv", "Microsoft Hyper-V"),
        ("VMwareVMware", "VMware"),
        ("XenVMMXenVMM", "Xen"),
        ("TCGTCGTCGTCG", "QEMU (TCG)"),
        ("lrpepyh  vr", "Parallels"),
        ("ACRNACRNACRN", "ACRN"),
        ("bhyve bhyve", "bhyve"),
        ("QNXQVMBSQG", "QNX"),
        ("VBoxVBoxVBox", "VirtualBox"),
    ];
    known
        .iter()
        .find(|(s, _)| sig.trim() == *s)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| sig.trim().to_string())
}

/// What /proc/cpuinfo says of the `hypervisor` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuinfoFlag {
    Present,
    Absent,
    /// The CPU lists no flags line (Arm lists "Features").
    NoFlagsLine,
    /// The file is absent, not a regular file or too large.
    NotReadable,
}

/// The `hypervisor` flag of /proc/cpuinfo.
pub fn cpuinfo_flag(root: &Path) -> CpuinfoFlag {
    let Some(text) = system_text(&root.join("proc/cpuinfo")) else {
        return CpuinfoFlag::NotReadable;
    };
    let flags = text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "flags").then_some(v)
    });
    match flags {
        None => CpuinfoFlag::NoFlagsLine,
        Some(f) if f.split_whitespace().any(|f| f == "hypervisor") => CpuinfoFlag::Present,
        Some(_) => CpuinfoFlag::Absent,
    }
}

/// The DMI strings nodecert consults, in this order.
pub const DMI_FIELDS: [&str; 4] = [
    "sys_vendor",
    "product_name",
    "bios_vendor",
    "chassis_vendor",
];

/// One DMI string, trimmed; None when absent or empty.
pub fn dmi(root: &Path, field: &str) -> Option<String> {
    read_trimmed(&root.join("sys/class/dmi/id").join(field))
}

/// /sys/hypervisor/type (Xen guests and dom0).
pub fn sys_hypervisor_type(root: &Path) -> Option<String> {
    read_trimmed(&root.join("sys/hypervisor/type"))
}

/// The Arm device tree's /hypervisor compatible strings, e.g. ["xen,xen-4.15", "xen,xen"].
pub fn device_tree_hypervisor(root: &Path) -> Option<Vec<String>> {
    let raw = system_bytes(&root.join("proc/device-tree/hypervisor/compatible"))?;
    let list: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).trim().to_string())
        .collect();
    (!list.is_empty()).then_some(list)
}

/// The hypervisor that DMI strings point to, if they point to one.
pub fn dmi_vm_vendor(sys_vendor: Option<&str>, product: Option<&str>) -> Option<String> {
    let v = sys_vendor.unwrap_or("").to_ascii_lowercase();
    let p = product.unwrap_or("").to_ascii_lowercase();
    let name = if v.contains("qemu") || p.contains("kvm") {
        "QEMU/KVM"
    } else if v.contains("microsoft") && p.contains("virtual machine") {
        "Microsoft Hyper-V"
    } else if v.contains("vmware") {
        "VMware"
    } else if v.contains("xen") || p.contains("hvm domu") {
        "Xen"
    } else if v.contains("innotek") || p.contains("virtualbox") {
        "VirtualBox"
    } else if p.contains("openstack") {
        "OpenStack (KVM)"
    } else if v.contains("google") && p.contains("compute engine") {
        "Google Compute Engine"
    } else if v.contains("amazon ec2") && !p.ends_with(".metal") {
        "Amazon EC2 (Nitro)"
    } else {
        return None;
    };
    Some(name.to_string())
}

/// The hypervisor named by Arm device-tree compatible strings.
pub fn device_tree_vendor(compatible: &[String]) -> String {
    let all = compatible.join(",").to_ascii_lowercase();
    if all.contains("xen") {
        "Xen".into()
    } else if all.contains("kvm") {
        "KVM".into()
    } else {
        compatible.first().cloned().unwrap_or_default()
    }
}

/// The bytes of a file the kernel or the system gives: None when absent, not a regular file
/// (a FIFO would wait for ever) or larger than [`Kind::System`](crate::fsio::read::Kind) allows.
pub(crate) fn system_bytes(p: &Path) -> Option<Vec<u8>> {
    crate::fsio::read::read(p, crate::fsio::read::Kind::System).ok()
}

/// As [`system_bytes`], as text.
pub(crate) fn system_text(p: &Path) -> Option<String> {
    crate::fsio::read::read_to_string(p, crate::fsio::read::Kind::System).ok()
}

pub(crate) fn read_trimmed(p: &Path) -> Option<String> {
    let s = system_text(p)?;
    let s = s.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_name_hypervisors() {
        assert_eq!(signature_text(b"KVMKVMKVM\0\0\0"), "KVMKVMKVM");
        assert_eq!(cpuid_vendor_name("KVMKVMKVM"), "KVM");
        assert_eq!(cpuid_vendor_name("Microsoft Hv"), "Microsoft Hyper-V");
        assert_eq!(cpuid_vendor_name("SomethingNew"), "SomethingNew");
    }

    #[test]
    fn dmi_strings_point_to_vms() {
        assert_eq!(
            dmi_vm_vendor(Some("Microsoft Corporation"), Some("Virtual Machine")).as_deref(),
            Some("Microsoft Hyper-V")
        );
        assert_eq!(
            dmi_vm_vendor(Some("Amazon EC2"), Some("p5.48xlarge")).as_deref(),
            Some("Amazon EC2 (Nitro)")
        );
        assert_eq!(dmi_vm_vendor(Some("Amazon EC2"), Some("i3.metal")), None);
        assert_eq!(
            dmi_vm_vendor(Some("Supermicro"), Some("SYS-821GE-TNHR")),
            None
        );
    }

    #[test]
    fn cpuid_reads_without_crashing() {
        // Whatever this machine is, reading CPUID must not fault.
        let _ = read_cpuid();
    }
}
