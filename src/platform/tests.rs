//! Detection from sample /proc and /sys trees written to temp dirs.

use super::hypervisor::Cpuid;
use super::pci::{self, ACS_CAP_ID};
use super::*;
use std::path::PathBuf;

struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Self {
        Tree(tempfile::tempdir().expect("temp dir"))
    }
    fn root(&self) -> &Path {
        self.0.path()
    }
    fn file(&self, rel: &str, body: impl AsRef<[u8]>) -> &Self {
        let p = self.root().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, body).expect("write");
        self
    }
    fn dir(&self, rel: &str) -> &Self {
        std::fs::create_dir_all(self.root().join(rel)).expect("mkdir");
        self
    }
    /// A PCI device at `path` (under sys/devices) linked from sys/bus/pci/devices.
    fn pci(&self, path: &str, config: &[u8]) -> &Self {
        let dev = self.root().join("sys/devices").join(path);
        std::fs::create_dir_all(&dev).expect("mkdir");
        std::fs::write(dev.join("config"), config).expect("write");
        let name = dev.file_name().expect("name").to_owned();
        let links = self.root().join("sys/bus/pci/devices");
        std::fs::create_dir_all(&links).expect("mkdir");
        let link: PathBuf = links.join(&name);
        if !link.exists() {
            std::os::unix::fs::symlink(&dev, link).expect("symlink");
        }
        self
    }
}

fn cpuinfo(hypervisor: bool) -> String {
    format!(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu vme de pse sse2 {}avx512f\n\n",
        if hypervisor { "hypervisor " } else { "" }
    )
}

fn config_with_acs(ctrl: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x148 << 20)).to_le_bytes());
    c[0x148..0x14c].copy_from_slice(&(ACS_CAP_ID | (1 << 16)).to_le_bytes());
    c[0x14e..0x150].copy_from_slice(&ctrl.to_le_bytes());
    c
}

fn witness<'a>(v: &'a Virtualization, source: &str) -> &'a str {
    v.witnesses
        .iter()
        .find(|w| w.source == source)
        .map(|w| w.finding.as_str())
        .unwrap_or_else(|| panic!("no witness {source}: {:?}", v.witnesses))
}

fn bare_metal_tree() -> Tree {
    let t = Tree::new();
    t.file("proc/cpuinfo", cpuinfo(false))
        .file("sys/class/dmi/id/sys_vendor", "Supermicro\n")
        .file("sys/class/dmi/id/product_name", "SYS-821GE-TNHR\n")
        .file(
            "sys/class/dmi/id/bios_vendor",
            "American Megatrends International, LLC.\n",
        )
        .file("sys/class/dmi/id/chassis_vendor", "Supermicro\n")
        .dir("sys/kernel/iommu_groups/0")
        .dir("sys/kernel/iommu_groups/1")
        .dir("sys/kernel/iommu_groups/2");
    // GPU 0 behind a PCIe switch whose downstream port redirects peer traffic (ACS on).
    let sw = "pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:08.0";
    t.pci("pci0000:16/0000:16:01.0", &config_with_acs(0x01))
        .pci("pci0000:16/0000:16:01.0/0000:17:00.0", &[0u8; 4096])
        .pci(sw, &config_with_acs(0x1d))
        .pci(&format!("{sw}/0000:19:00.0"), &[0u8; 4096]);
    // GPU 1 behind a root port whose extended config space cannot be read (not root).
    t.pci("pci0000:a0/0000:a0:01.0", &[0u8; 64])
        .pci("pci0000:a0/0000:a0:01.0/0000:a1:00.0", &[0u8; 4096]);
    t.file(
        "sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:08.0/0000:19:00.0/numa_node",
        "1\n",
    )
    .file(
        "sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:08.0/0000:19:00.0/local_cpulist",
        "48-95,144-191\n",
    )
    .file(
        "sys/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/numa_node",
        "-1\n",
    );
    t
}

#[test]
fn bare_metal_finds_acs_bridges_and_iommu_groups() {
    let t = bare_metal_tree();
    let gpus = ["0000:19:00.0".to_string(), "0000:a1:00.0".to_string()];
    let (v, notes) = virtualization(t.root(), &Cpuid::NoHypervisor, Some(NvmlVirt::Bare), &gpus);
    assert_eq!(v.mode, VirtMode::BareMetal);
    assert_eq!(v.hypervisor, None);
    assert_eq!(v.iommu_groups, Some(3));
    assert_eq!(v.acs_enabled_bridges, vec!["0000:18:08.0".to_string()]);
    assert_eq!(v.acs_unknown_bridges, vec!["0000:a0:01.0".to_string()]);
    assert_eq!(
        notes,
        vec!["bridge 0000:a0:01.0 acs: extended config space not readable (needs root)"]
    );
    assert_eq!(witness(&v, "cpuinfo hypervisor flag"), "absent");
    assert_eq!(witness(&v, "dmi sys_vendor"), "Supermicro");
    assert_eq!(witness(&v, "nvml virtualization mode"), "None (bare metal)");
}

#[test]
fn bridges_are_walked_up_from_the_gpu() {
    let t = bare_metal_tree();
    let names: Vec<String> = pci::bridges_above(t.root(), "0000:19:00.0")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["0000:18:08.0", "0000:17:00.0", "0000:16:01.0"]);
    assert!(pci::bridges_above(t.root(), "0000:ff:00.0").is_empty());
}

#[test]
fn sysfs_numa_and_cpulist() {
    let t = bare_metal_tree();
    assert_eq!(pci::numa_node(t.root(), "0000:19:00.0"), Some(1));
    assert_eq!(pci::numa_node(t.root(), "0000:a1:00.0"), None);
    assert_eq!(pci::numa_node(t.root(), "0000:ff:00.0"), None);
    assert_eq!(
        pci::local_cpulist(t.root(), "0000:19:00.0").as_deref(),
        Some("48-95,144-191")
    );
}

#[test]
fn bare_metal_without_nvml_is_still_bare_metal() {
    let t = bare_metal_tree();
    let (v, _) = virtualization(t.root(), &Cpuid::NoHypervisor, None, &[]);
    assert_eq!(v.mode, VirtMode::BareMetal);
    assert_eq!(witness(&v, "nvml virtualization mode"), "not available");
}

#[test]
fn kvm_guest_is_passthrough_and_skips_acs() {
    let t = Tree::new();
    t.file("proc/cpuinfo", cpuinfo(true))
        .file("sys/class/dmi/id/sys_vendor", "QEMU\n")
        .file(
            "sys/class/dmi/id/product_name",
            "Standard PC (Q35 + ICH9, 2009)\n",
        )
        .file("sys/class/dmi/id/bios_vendor", "SeaBIOS\n")
        .dir("sys/kernel")
        .pci("pci0000:00/0000:00:02.0", &config_with_acs(0x1d))
        .pci("pci0000:00/0000:00:02.0/0000:01:00.0", &[0u8; 4096]);
    let gpus = ["0000:01:00.0".to_string()];
    let kvm = Cpuid::Vendor("KVMKVMKVM".into());
    let (v, notes) = virtualization(t.root(), &kvm, Some(NvmlVirt::PassThrough), &gpus);
    assert_eq!(v.mode, VirtMode::Passthrough);
    assert_eq!(v.hypervisor.as_deref(), Some("KVM"));
    assert_eq!(v.iommu_groups, Some(0));
    assert!(
        v.acs_enabled_bridges.is_empty(),
        "ACS is a bare-metal matter"
    );
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(witness(&v, "cpuid 0x40000000"), "KVMKVMKVM");
    assert_eq!(witness(&v, "dmi chassis_vendor"), "absent");
}

#[test]
fn firecracker_like_guest_without_dmi() {
    let t = Tree::new();
    t.file("proc/cpuinfo", cpuinfo(true)).dir("sys/kernel");
    let kvm = Cpuid::Vendor("KVMKVMKVM".into());
    // NVML says "none": a hypervisor flag with a bare GPU means it was passed through.
    let (v, _) = virtualization(t.root(), &kvm, Some(NvmlVirt::Bare), &[]);
    assert_eq!(v.mode, VirtMode::Passthrough);
    assert_eq!(
        v.hypervisor.as_deref(),
        Some("KVM (microVM without DMI, e.g. Firecracker)")
    );
    assert_eq!(witness(&v, "dmi sys_vendor"), "absent");
    assert_eq!(witness(&v, "/sys/hypervisor/type"), "absent");
    // Only the cpuinfo flag (the H200 capture): a hypervisor, not named.
    let (v, _) = virtualization(
        t.root(),
        &Cpuid::NotAvailable,
        Some(NvmlVirt::PassThrough),
        &[],
    );
    assert_eq!(v.mode, VirtMode::Passthrough);
    assert_eq!(v.hypervisor.as_deref(), Some("unidentified hypervisor"));
}

#[test]
fn hyper_v_guest() {
    let t = Tree::new();
    t.file("proc/cpuinfo", cpuinfo(true))
        .file("sys/class/dmi/id/sys_vendor", "Microsoft Corporation\n")
        .file("sys/class/dmi/id/product_name", "Virtual Machine\n")
        .file("sys/class/dmi/id/bios_vendor", "Microsoft Corporation\n")
        .file("sys/class/dmi/id/chassis_vendor", "Microsoft Corporation\n")
        .dir("sys/kernel");
    let hv = Cpuid::Vendor("Microsoft Hv".into());
    let (v, _) = virtualization(t.root(), &hv, Some(NvmlVirt::PassThrough), &[]);
    assert_eq!(v.mode, VirtMode::Passthrough);
    assert_eq!(v.hypervisor.as_deref(), Some("Microsoft Hyper-V"));
    // Without NVML the guest is a VM, but passthrough and vGPU cannot be told apart.
    let (v, _) = virtualization(t.root(), &hv, None, &[]);
    assert_eq!(v.mode, VirtMode::Unknown);
    assert_eq!(v.hypervisor.as_deref(), Some("Microsoft Hyper-V"));
    let (v, _) = virtualization(t.root(), &hv, Some(NvmlVirt::Vgpu), &[]);
    assert_eq!(v.mode, VirtMode::Vgpu);
}

#[test]
fn arm_guest_from_the_device_tree() {
    let t = Tree::new();
    t.file(
        "proc/cpuinfo",
        "processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes\n\n",
    )
    .file(
        "proc/device-tree/hypervisor/compatible",
        b"xen,xen-4.15\0xen,xen\0",
    )
    .file("sys/hypervisor/type", "xen\n")
    .dir("sys/kernel/iommu_groups/7");
    let (v, _) = virtualization(t.root(), &Cpuid::NotAvailable, Some(NvmlVirt::Bare), &[]);
    assert_eq!(v.mode, VirtMode::Passthrough);
    assert_eq!(v.hypervisor.as_deref(), Some("Xen"));
    assert_eq!(v.iommu_groups, Some(1));
    assert_eq!(
        witness(&v, "device tree hypervisor"),
        "xen,xen-4.15, xen,xen"
    );
    assert_eq!(
        witness(&v, "cpuinfo hypervisor flag"),
        "not available (no x86 flags line)"
    );
}

#[test]
fn arm_bare_metal_from_dmi_alone() {
    let t = Tree::new();
    t.file("proc/cpuinfo", "processor\t: 0\nFeatures\t: fp asimd\n\n")
        .file("sys/class/dmi/id/sys_vendor", "NVIDIA\n")
        .file("sys/class/dmi/id/product_name", "P3880\n")
        .dir("sys/kernel");
    let (v, _) = virtualization(t.root(), &Cpuid::NotAvailable, None, &[]);
    assert_eq!(v.mode, VirtMode::BareMetal);
}

#[test]
fn nothing_readable_is_unknown() {
    let t = Tree::new();
    let (v, notes) = virtualization(t.root(), &Cpuid::NotAvailable, None, &[]);
    assert_eq!(v.mode, VirtMode::Unknown);
    assert_eq!(v.iommu_groups, None);
    assert_eq!(notes, vec!["iommu groups: /sys/kernel not readable"]);
}

#[test]
fn the_vgpu_host_is_bare_metal() {
    let t = bare_metal_tree();
    let (v, _) = virtualization(
        t.root(),
        &Cpuid::NoHypervisor,
        Some(NvmlVirt::HostVgpu),
        &[],
    );
    assert_eq!(v.mode, VirtMode::BareMetal);
    assert_eq!(witness(&v, "nvml virtualization mode"), "HostVgpu");
}

#[test]
fn recorded_witnesses_say_which_named_a_hypervisor() {
    let names = |v: &Virtualization| -> Vec<(String, Option<String>)> {
        hypervisor_witnesses(&v.witnesses)
            .into_iter()
            .map(|w| (w.source, w.names))
            .collect()
    };
    let own = |s: &str, n: Option<&str>| (s.to_string(), n.map(String::from));
    let (v, _) = virtualization(bare_metal_tree().root(), &Cpuid::NoHypervisor, None, &[]);
    assert!(names(&v).is_empty(), "{:?}", names(&v));

    let t = Tree::new();
    t.file("proc/cpuinfo", cpuinfo(true))
        .file("sys/class/dmi/id/sys_vendor", "QEMU\n")
        .file(
            "sys/class/dmi/id/product_name",
            "Standard PC (Q35 + ICH9, 2009)\n",
        );
    let (v, _) = virtualization(t.root(), &Cpuid::Vendor("KVMKVMKVM".into()), None, &[]);
    assert_eq!(
        names(&v),
        [
            own("cpuid 0x40000000", Some("KVM")),
            own("cpuinfo hypervisor flag", None),
            own("dmi", Some("QEMU/KVM")),
        ]
    );

    let t = Tree::new();
    t.file("proc/cpuinfo", "processor\t: 0\nFeatures\t: fp\n\n")
        .file(
            "proc/device-tree/hypervisor/compatible",
            b"xen,xen-4.15\0xen,xen\0",
        )
        .file("sys/hypervisor/type", "xen\n");
    let (v, _) = virtualization(t.root(), &Cpuid::NotAvailable, None, &[]);
    assert_eq!(
        names(&v),
        [
            own("/sys/hypervisor/type", Some("Xen")),
            own("device tree hypervisor", Some("Xen")),
        ]
    );
    let answered: Vec<&str> = answering_witnesses(&v.witnesses)
        .iter()
        .map(|w| w.source.as_str())
        .collect();
    assert_eq!(answered, ["/sys/hypervisor/type", "device tree hypervisor"]);
}

#[test]
fn the_socket_of_a_numa_node_is_its_first_cpus_package() {
    // NPS2: nodes 0 and 1 on package 0, nodes 2 and 3 on package 1.
    let t = Tree::new();
    for (node, cpus, first, pkg) in [
        (0, "0-23,96-119", 0, 0),
        (1, "24-47,120-143", 24, 0),
        (2, "48-71,144-167", 48, 1),
        (3, "72-95", 72, 1),
    ] {
        t.file(
            &format!("sys/devices/system/node/node{node}/cpulist"),
            format!("{cpus}\n"),
        )
        .file(
            &format!("sys/devices/system/cpu/cpu{first}/topology/physical_package_id"),
            format!("{pkg}\n"),
        );
    }
    assert_eq!(pci::numa_socket(t.root(), 0), Some(0));
    assert_eq!(pci::numa_socket(t.root(), 1), Some(0));
    assert_eq!(pci::numa_socket(t.root(), 2), Some(1));
    assert_eq!(pci::numa_socket(t.root(), 3), Some(1));
    // A node sysfs does not list (a VM), or whose CPU says no package: not reported.
    assert_eq!(pci::numa_socket(t.root(), 4), None);
    t.file("sys/devices/system/node/node5/cpulist", "200\n");
    assert_eq!(pci::numa_socket(t.root(), 5), None);
}

use crate::testutil::mkfifo;

/// A FIFO where the kernel would give a file is refused at once (reading it would wait for a
/// writer for ever), and a file past the system-file limit is not read: both are "not readable".
#[test]
fn a_fifo_or_an_endless_file_in_the_tree_is_not_read() {
    let t = bare_metal_tree();
    std::fs::remove_file(t.root().join("proc/cpuinfo")).expect("rm");
    mkfifo(&t.root().join("proc/cpuinfo"));
    // GPU 0's switch port: its config space is now a FIFO.
    let port = t
        .root()
        .join("sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:08.0");
    std::fs::remove_file(port.join("config")).expect("rm");
    mkfifo(&port.join("config"));
    // DMI: larger than any system file may be.
    let limit = crate::fsio::read::Kind::System.limit() as usize;
    t.file("sys/class/dmi/id/sys_vendor", vec![b'x'; limit + 1]);
    // On a thread: a read that waits on a FIFO fails this test instead of hanging it.
    let root = t.root().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let gpus = ["0000:19:00.0".to_string()];
        let v = virtualization(&root, &Cpuid::NoHypervisor, Some(NvmlVirt::Bare), &gpus);
        let _ = tx.send((v, hypervisor::cpuinfo_flag(&root)));
    });
    let ((v, notes), flag) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("a FIFO was waited on");
    assert_eq!(flag, hypervisor::CpuinfoFlag::NotReadable);
    assert_eq!(
        v.acs_enabled_bridges,
        Vec::<String>::new(),
        "the FIFO is not read"
    );
    assert!(
        notes.contains(
            &"bridge 0000:18:08.0 acs: extended config space not readable (needs root)".to_string()
        ),
        "{notes:?}"
    );
    assert_eq!(hypervisor::dmi(t.root(), "sys_vendor"), None);
    assert_eq!(
        witness(&v, "cpuinfo hypervisor flag"),
        "not available (not readable)"
    );
    // Exactly at the limit is still read.
    t.file("sys/class/dmi/id/sys_vendor", vec![b'x'; limit]);
    assert_eq!(
        hypervisor::dmi(t.root(), "sys_vendor").map(|s| s.len()),
        Some(limit)
    );
}
