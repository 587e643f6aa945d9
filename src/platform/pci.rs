//! PCI facts from sysfs: a device's NUMA node and CPU list, IOMMU groups, and the PCIe ACS
//! state of the bridges above a GPU. Every reader takes the root of the file tree.

use super::hypervisor::{read_trimmed, system_bytes};
use std::path::{Path, PathBuf};

/// PCIe extended capability id of Access Control Services.
pub const ACS_CAP_ID: u32 = 0x000d;
/// ACS control register bits: P2P Request Redirect and P2P Completion Redirect.
pub const ACS_P2P_REQUEST_REDIRECT: u16 = 1 << 2;
pub const ACS_P2P_COMPLETION_REDIRECT: u16 = 1 << 3;

fn device_dir(root: &Path, bus_id: &str) -> PathBuf {
    root.join("sys/bus/pci/devices").join(bus_id)
}

/// NUMA node of a PCI device from sysfs; None when absent or -1 (not reported).
pub fn numa_node(root: &Path, bus_id: &str) -> Option<i32> {
    let v: i32 = read_trimmed(&device_dir(root, bus_id).join("numa_node"))?
        .parse()
        .ok()?;
    (v >= 0).then_some(v)
}

/// CPUs close to a PCI device from sysfs, as a list like "0-15,32-47".
pub fn local_cpulist(root: &Path, bus_id: &str) -> Option<String> {
    read_trimmed(&device_dir(root, bus_id).join("local_cpulist"))
}

/// The CPU socket (physical package id) that NUMA node `node` belongs to: the package of the
/// node's first CPU. None when sysfs does not say (a VM without NUMA, an offline CPU).
pub fn numa_socket(root: &Path, node: i32) -> Option<u32> {
    let sys = root.join("sys/devices/system");
    let cpus = read_trimmed(&sys.join(format!("node/node{node}/cpulist")))?;
    let first: u32 = cpus.split([',', '-']).next()?.trim().parse().ok()?;
    read_trimmed(&sys.join(format!("cpu/cpu{first}/topology/physical_package_id")))?
        .parse()
        .ok()
}

/// Number of IOMMU groups; Some(0) when the kernel has none, None when sysfs cannot be read.
pub fn iommu_groups(root: &Path) -> Option<u32> {
    match std::fs::read_dir(root.join("sys/kernel/iommu_groups")) {
        Ok(rd) => Some(rd.filter_map(Result::ok).count() as u32),
        Err(_) if root.join("sys/kernel").is_dir() => Some(0),
        Err(_) => None,
    }
}

/// What a device's config space says about ACS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acs {
    /// The extended config space (where ACS is) could not be read: as non-root the kernel
    /// gives only the first 64 bytes (128 of a CardBus bridge).
    NotReadable,
    /// The device has no ACS capability.
    Absent,
    /// The ACS control register.
    Control(u16),
}

impl Acs {
    /// P2P requests or completions are redirected upstream.
    pub fn redirects(self) -> bool {
        matches!(self, Acs::Control(c) if c & (ACS_P2P_REQUEST_REDIRECT | ACS_P2P_COMPLETION_REDIRECT) != 0)
    }
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

/// Find the ACS capability in a config space image (the sysfs `config` file).
pub fn parse_acs(config: &[u8]) -> Acs {
    if config.len() < 0x104 {
        // As root, the kernel gives 256 bytes of a device without an extended config space:
        // a conventional PCI device (no PCI Express capability) has no ACS; a PCI Express one
        // on a platform that cannot reach its extended space (no ECAM) is not known.
        if config.len() >= 0x100 && has_pcie_capability(config) == Some(false) {
            return Acs::Absent;
        }
        return Acs::NotReadable;
    }
    let mut off = 0x100usize;
    // The list is short; the bound guards against loops in a corrupt image.
    for _ in 0..64 {
        let Some(hdr) = u32_at(config, off) else {
            return Acs::NotReadable;
        };
        if hdr == 0 || hdr == u32::MAX {
            return Acs::Absent;
        }
        if hdr & 0xffff == ACS_CAP_ID {
            return u16_at(config, off + 6).map_or(Acs::NotReadable, Acs::Control);
        }
        let next = ((hdr >> 20) & 0xffc) as usize;
        if next < 0x100 {
            return Acs::Absent;
        }
        off = next;
    }
    Acs::Absent
}

/// Whether the standard capability list (status bit 4, pointer at 0x34) of a config space image
/// holds the PCI Express capability (id 0x10). None where the image does not say: a device
/// that answers all ones (gone, or an error response), or a list that does not end cleanly (a
/// pointer into the header, a loop).
fn has_pcie_capability(config: &[u8]) -> Option<bool> {
    const PCIE_CAP_ID: u8 = 0x10;
    let vendor = u16_at(config, 0)?;
    if vendor == 0xffff {
        return None;
    }
    // A CardBus bridge (header type 2) is conventional PCI, with its list elsewhere.
    if config.get(0x0e)? & 0x7f == 2 {
        return Some(false);
    }
    if config.get(0x06)? & 0x10 == 0 {
        return Some(false);
    }
    let mut at = usize::from(config.get(0x34)? & 0xfc);
    // At most 48 capabilities fit after the header; the bound guards against loops.
    for _ in 0..48 {
        if at == 0 {
            return Some(false);
        }
        if at < 0x40 {
            return None;
        }
        if *config.get(at)? == PCIE_CAP_ID {
            return Some(true);
        }
        at = usize::from(config.get(at + 1)? & 0xfc);
    }
    None
}

/// "0000:3b:00.0" shaped: domain:bus:device.function in hex.
pub fn is_bdf(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    let lens = [4, 2, 2, 1];
    parts.len() == 4
        && parts
            .iter()
            .zip(lens)
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The PCI bridges above a device, nearest first, as (bus id, sysfs dir).
pub fn bridges_above(root: &Path, bus_id: &str) -> Vec<(String, PathBuf)> {
    let Ok(real) = std::fs::canonicalize(device_dir(root, bus_id)) else {
        return vec![];
    };
    real.ancestors()
        .skip(1)
        .map_while(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            is_bdf(&name).then(|| (name, p.to_path_buf()))
        })
        .collect()
}

/// Bridges above the given GPUs with ACS redirection on, and those whose ACS could not be read
/// (their extended config space needs root): by bus id, each once.
pub fn acs_redirecting_bridges(root: &Path, gpus: &[String]) -> (Vec<String>, Vec<String>) {
    let mut on = Vec::new();
    let mut unread = Vec::new();
    for gpu in gpus {
        for (bdf, dir) in bridges_above(root, gpu) {
            match system_bytes(&dir.join("config")).map(|b| parse_acs(&b)) {
                Some(a) if a.redirects() => on.push(bdf),
                Some(Acs::NotReadable) | None => unread.push(bdf),
                Some(_) => {}
            }
        }
    }
    for v in [&mut on, &mut unread] {
        v.sort();
        v.dedup();
    }
    (on, unread)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4 KiB config space with AER at 0x100 and ACS at 0x148 holding `ctrl`.
    fn config_with_acs(ctrl: u16) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x148 << 20)).to_le_bytes());
        c[0x148..0x14c].copy_from_slice(&(ACS_CAP_ID | (1 << 16)).to_le_bytes());
        c[0x14e..0x150].copy_from_slice(&ctrl.to_le_bytes());
        c
    }

    #[test]
    fn acs_is_found_in_the_capability_list() {
        assert_eq!(parse_acs(&config_with_acs(0x1d)), Acs::Control(0x1d));
        assert!(parse_acs(&config_with_acs(0x1d)).redirects());
        assert!(parse_acs(&config_with_acs(ACS_P2P_COMPLETION_REDIRECT)).redirects());
        assert!(!parse_acs(&config_with_acs(0x01)).redirects());
        assert_eq!(parse_acs(&[0u8; 64]), Acs::NotReadable);
        // Root's 256 bytes of a device with no extended space: a conventional PCI bridge has
        // no ACS; a PCI Express one (capability 0x10 in the list from 0x34) is not known.
        let mut conventional = [0u8; 256];
        conventional[0] = 0x86; // a vendor that answers (0x8086)
        conventional[1] = 0x80;
        assert_eq!(parse_acs(&conventional), Acs::Absent);
        let mut pcie = conventional;
        pcie[0x06] = 0x10;
        pcie[0x34] = 0x40;
        pcie[0x40] = 0x01; // power management, then
        pcie[0x41] = 0x60;
        pcie[0x60] = 0x10; // PCI Express
        assert_eq!(parse_acs(&pcie), Acs::NotReadable);
        assert_eq!(parse_acs(&pcie[..64]), Acs::NotReadable);
        // Without the status bit, or with the list ending first, there is no such capability.
        let mut no_list = pcie;
        no_list[0x06] = 0;
        assert_eq!(parse_acs(&no_list), Acs::Absent);
        let mut ends = pcie;
        ends[0x41] = 0;
        assert_eq!(parse_acs(&ends), Acs::Absent);
        // A list that does not end cleanly (it loops, or points into the header), or a device
        // that answers all ones, does not say: not known, never taken for no ACS.
        let mut looped = pcie;
        looped[0x41] = 0x40;
        looped[0x60] = 0x01;
        assert_eq!(parse_acs(&looped), Acs::NotReadable);
        let mut into_header = pcie;
        into_header[0x41] = 0x20;
        assert_eq!(parse_acs(&into_header), Acs::NotReadable);
        assert_eq!(parse_acs(&[0xffu8; 256]), Acs::NotReadable);
        // A CardBus bridge (header type 2) is conventional PCI.
        let mut cardbus = pcie;
        cardbus[0x0e] = 0x82;
        assert_eq!(parse_acs(&cardbus), Acs::Absent);
        assert_eq!(parse_acs(&[0u8; 4096]), Acs::Absent);
    }

    #[test]
    fn acs_past_the_first_512_bytes_is_found_in_a_full_config_space_only() {
        // As root reads it (4096 bytes): AER at 0x100, Secondary PCIe at 0x148, ACS at 0x2a0
        // (the layout tests/fixtures/sysfs/make.py writes).
        let mut c = vec![0u8; 4096];
        let mut put = |off: usize, v: u32| c[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put(0x100, 0x0001 | (2 << 16) | (0x148 << 20));
        put(0x148, 0x0019 | (1 << 16) | (0x2a0 << 20));
        put(0x2a0, ACS_CAP_ID | (1 << 16));
        c[0x2a6..0x2a8].copy_from_slice(&0x1du16.to_le_bytes());
        assert_eq!(parse_acs(&c), Acs::Control(0x1d));
        // Cut short (512 bytes, or the 256 of the legacy space): not readable, never absent.
        assert_eq!(parse_acs(&c[..512]), Acs::NotReadable);
        assert_eq!(parse_acs(&c[..0x104]), Acs::NotReadable);
        // An ACS header in the last dword: its control register would be past the end.
        let mut end = vec![0u8; 4096];
        end[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0xffc << 20)).to_le_bytes());
        end[0xffc..0x1000].copy_from_slice(&(ACS_CAP_ID | (1 << 16)).to_le_bytes());
        assert_eq!(parse_acs(&end), Acs::NotReadable);
        // A list that loops on itself ends, and says no ACS.
        let mut looped = vec![0u8; 4096];
        looped[0x100..0x104]
            .copy_from_slice(&(0x0001u32 | (1 << 16) | (0x100 << 20)).to_le_bytes());
        assert_eq!(parse_acs(&looped), Acs::Absent);
    }

    #[test]
    fn bus_ids_are_recognised() {
        assert!(is_bdf("0000:3b:00.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:3b:00"));
    }
}
