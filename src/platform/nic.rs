//! The node's RDMA NICs from sysfs, under a root that tests point at a fixture tree:
//! `sys/class/infiniband/*` (ports, state, rate, link layer, firmware, GUIDs, error counters),
//! `sys/class/net/*` (the ports' interfaces), each NIC's and GPU's place in the PCI tree (for
//! their relation, as `nvidia-smi topo -m` prints it, and the ACS state of the bridges between
//! them) and GPUDirect RDMA's kernel side (`nvidia_peermem`, the peer-memory interface).
//!
//! Every file is read bounded, as a regular file; every symbolic link is resolved inside the
//! root (a link out of it is not followed); a reading that is absent is `None` with a note.

use super::pci::{parse_acs, Acs};
use crate::network::{
    parse_rate, relation, state_name, Fabric, Gdr, NetDev, Nic, NicPort, PciPlace, CARRIER_CHANGES,
    COUNTERS,
};
use crate::suite::PciePath;
use std::path::{Path, PathBuf};

/// The most RDMA devices, ports per device and interfaces per device read: far above any node.
const MAX_NICS: usize = 256;
const MAX_PORTS: u32 = 64;
/// The most bytes read of one sysfs attribute (a config space is 4 KiB).
const MAX_ATTR: u64 = 64 * 1024;

/// A GPU as the reader needs it: its index, PCI bus id and NUMA node.
#[derive(Debug, Clone)]
pub struct GpuAt {
    pub index: usize,
    pub pci_bus_id: String,
    pub numa_node: Option<i32>,
}

/// The bytes of a sysfs attribute, bounded; None when absent, not a regular file, or reached
/// only through a link out of `root` (sysfs's own links, inside it, are followed).
fn read_bytes(root: &Path, p: &Path) -> Option<Vec<u8>> {
    let real = resolve(root, p)?;
    let f = crate::fsio::read::open(&real, false).ok()?;
    crate::fsio::read::read_limited(f, MAX_ATTR, "a sysfs attribute").ok()
}

/// A sysfs attribute as text, trimmed; None when absent, empty or not text.
fn read_attr(root: &Path, p: &Path) -> Option<String> {
    let b = read_bytes(root, p)?;
    let s = String::from_utf8(b).ok()?;
    let s = s.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!s.is_empty() && !s.chars().any(|c| c.is_control())).then(|| s.to_string())
}

fn read_num<T: std::str::FromStr>(root: &Path, p: &Path) -> Option<T> {
    read_attr(root, p)?.parse().ok()
}

/// The entries of a folder, sorted, names only (None when it cannot be listed, or is reached
/// only through a link out of `root`).
fn list(root: &Path, dir: &Path, limit: usize) -> Option<Vec<String>> {
    let rd = std::fs::read_dir(resolve(root, dir)?).ok()?;
    let mut v: Vec<String> = rd
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .take(limit + 1)
        .collect();
    v.sort_by(|a, b| crate::fleet::natural_cmp(a, b));
    Some(v)
}

/// `p` with every link resolved, only when it stays inside `root` (already canonical).
fn resolve(root: &Path, p: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(p).ok()?;
    real.starts_with(root).then_some(real)
}

/// Where the PCI function whose sysfs folder is `dev` sits (`dev` resolved inside `root`).
fn place(root: &Path, dev: &Path) -> Option<PciPlace> {
    let rel = dev.strip_prefix(root).ok()?;
    let mut parts = rel.iter().map(|c| c.to_str().unwrap_or(""));
    if parts.next()? != "sys" || parts.next()? != "devices" {
        return None;
    }
    let host_bridge = parts.next()?.to_string();
    if !host_bridge.starts_with("pci") {
        return None;
    }
    // Functions down to the device itself; a domain may have more than 4 hex digits (a VMD
    // controller's "10000:e1:00.0").
    let chain: Vec<String> = parts
        .take_while(|c| is_function(c))
        .map(String::from)
        .collect();
    if chain.is_empty() {
        return None;
    }
    let numa_node = read_num::<i32>(root, &dev.join("numa_node")).filter(|n| *n >= 0);
    Some(PciPlace {
        host_bridge,
        chain,
        numa_node,
    })
}

/// "0000:3b:00.0" or "10000:e1:00.0": domain (4 or more hex digits), bus, device, function.
fn is_function(s: &str) -> bool {
    match s.split_once(':') {
        Some((domain, rest)) if domain.len() >= 4 && domain.len() <= 8 => {
            domain.bytes().all(|b| b.is_ascii_hexdigit())
                && super::pci::is_bdf(&format!("0000:{rest}"))
        }
        _ => false,
    }
}

/// The sysfs folder of the PCI function `bus_id`, resolved inside `root`.
fn pci_dir(root: &Path, bus_id: &str) -> Option<PathBuf> {
    resolve(root, &root.join("sys/bus/pci/devices").join(bus_id))
}

/// The folder of the function `chain[i]`: the prefix of `dev`'s path that ends in it.
fn ancestor_dir(dev: &Path, bus_id: &str) -> Option<PathBuf> {
    dev.ancestors()
        .find(|p| p.file_name().and_then(|n| n.to_str()) == Some(bus_id))
        .map(Path::to_path_buf)
}

/// Bridges on the path between two places (each side's bridges below the shared part, and the
/// deepest shared one), with the folder of each.
fn bridges_between(a: (&PciPlace, &Path), b: (&PciPlace, &Path)) -> Vec<(String, PathBuf)> {
    let (pa, da) = a;
    let (pb, db) = b;
    let common = pa
        .chain
        .iter()
        .zip(&pb.chain)
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = Vec::new();
    if common > 0 && common < pa.chain.len() {
        let id = &pa.chain[common - 1];
        if let Some(d) = ancestor_dir(da, id) {
            out.push((id.clone(), d));
        }
    }
    for (p, d) in [(pa, da), (pb, db)] {
        let end = p.chain.len().saturating_sub(1);
        for id in p.chain.iter().take(end).skip(common) {
            if let Some(dir) = ancestor_dir(d, id) {
                out.push((id.clone(), dir));
            }
        }
    }
    out
}

/// Read the NICs under `root` and relate them to `gpus`.
pub fn read(root: &Path, gpus: &[GpuAt]) -> Fabric {
    let mut f = Fabric::default();
    let Ok(root) = std::fs::canonicalize(root) else {
        f.unavailable
            .push(format!("nics: {} cannot be read", root.display()));
        return f;
    };
    f.gdr = gdr(&root);
    let class = root.join("sys/class/infiniband");
    // No RDMA stack loaded, or a VM with none passed through: no NIC, said as such.
    let names = list(&root, &class, MAX_NICS).unwrap_or_default();
    if names.len() > MAX_NICS {
        f.unavailable.push(format!(
            "nics: more than {MAX_NICS} RDMA devices; only the first {MAX_NICS} are read"
        ));
    }
    let gpu_places: Vec<Option<(PciPlace, PathBuf)>> = gpus
        .iter()
        .map(|g| {
            let dir = pci_dir(&root, &g.pci_bus_id)?;
            let mut p = place(&root, &dir)?;
            // The inventory's NUMA node (NVML's) where sysfs gives none.
            p.numa_node = p.numa_node.or(g.numa_node);
            Some((p, dir))
        })
        .collect();
    for (g, p) in gpus.iter().zip(&gpu_places) {
        if p.is_none() {
            f.unavailable.push(format!(
                "gpu{} ({}): not found in the PCI tree under {}: its relation to the NICs is unknown",
                g.index,
                g.pci_bus_id,
                root.display()
            ));
        }
    }
    for name in names.into_iter().take(MAX_NICS) {
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            f.unavailable.push(format!(
                "nics: a device with an unusual name ({name:?}) is skipped"
            ));
            continue;
        }
        let dir = class.join(&name);
        f.nics.push(read_nic(
            &root,
            &dir,
            &name,
            &gpu_places,
            &mut f.unavailable,
        ));
    }
    f
}

fn read_nic(
    root: &Path,
    dir: &Path,
    name: &str,
    gpus: &[Option<(PciPlace, PathBuf)>],
    notes: &mut Vec<String>,
) -> Nic {
    let mut nic = Nic {
        name: name.to_string(),
        fw_ver: read_attr(root, &dir.join("fw_ver")),
        node_guid: read_attr(root, &dir.join("node_guid")),
        sys_image_guid: read_attr(root, &dir.join("sys_image_guid")),
        ..Default::default()
    };
    let dev = resolve(root, &dir.join("device"));
    let here = dev
        .as_ref()
        .and_then(|d| Some((place(root, d)?, d.clone())));
    match &here {
        Some((p, d)) => {
            nic.pci_bus_id = p.chain.last().cloned();
            nic.numa_node = p.numa_node;
            let mut acs = Vec::new();
            let mut unknown = Vec::new();
            for g in gpus {
                let path = g.as_ref().and_then(|(gp, _)| relation(gp, p));
                nic.gpu_paths.push(path);
                // ACS matters where GPUDirect traffic would stay below the root complex.
                if let (Some((gp, gd)), Some(PciePath::Pix | PciePath::Pxb)) = (g, path) {
                    for (id, bdir) in bridges_between((gp, gd), (p, d)) {
                        match read_bytes(root, &bdir.join("config")).map(|b| parse_acs(&b)) {
                            Some(a) if a.redirects() => acs.push(id),
                            Some(Acs::NotReadable) | None => {
                                unknown.push(id.clone());
                                notes.push(format!(
                                    "bridge {id} acs: extended config space not readable (needs root)"
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
            acs.sort();
            acs.dedup();
            nic.acs_redirect = acs;
            unknown.sort();
            unknown.dedup();
            nic.acs_unknown = unknown;
        }
        None => {
            nic.gpu_paths = vec![None; gpus.len()];
            notes.push(format!(
                "{name}: its PCI function is not found under {}: its relation to the GPUs is unknown",
                root.display()
            ));
        }
    }
    // The interfaces of the NIC's function, by port (dev_port counts from 0).
    let mut netdevs: Vec<(u32, String)> = Vec::new();
    if let Some(d) = &dev {
        for n in list(root, &d.join("net"), MAX_PORTS as usize).unwrap_or_default() {
            let Some(port) = read_num::<u32>(root, &d.join("net").join(&n).join("dev_port"))
                .unwrap_or(0)
                .checked_add(1)
            else {
                continue;
            };
            netdevs.push((port, n));
        }
    }
    let ports = list(root, &dir.join("ports"), MAX_PORTS as usize).unwrap_or_default();
    if ports.is_empty() {
        notes.push(format!("{name}: no port could be read"));
    }
    for p in ports
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|p| (1..=MAX_PORTS).contains(p))
    {
        let pd = dir.join("ports").join(p.to_string());
        let mut port = NicPort {
            port: p,
            state: read_attr(root, &pd.join("state")).map(|s| state_name(&s)),
            phys_state: read_attr(root, &pd.join("phys_state")).map(|s| state_name(&s)),
            rate_gbps: read_attr(root, &pd.join("rate")).and_then(|r| parse_rate(&r)),
            link_layer: read_attr(root, &pd.join("link_layer")),
            ..Default::default()
        };
        for (what, missing) in [
            ("state", port.state.is_none()),
            ("phys_state", port.phys_state.is_none()),
            ("rate", port.rate_gbps.is_none()),
            ("link_layer", port.link_layer.is_none()),
        ] {
            if missing {
                notes.push(format!("{name} port {p} {what}: not readable"));
            }
        }
        for c in COUNTERS {
            if let Some(v) = read_num::<u64>(root, &pd.join("counters").join(c)) {
                port.counters.insert(c.to_string(), v);
            }
        }
        // One interface for the port: the one whose dev_port says so, else the only one.
        let nd = netdevs
            .iter()
            .find(|(n, _)| *n == p)
            .or_else(|| (netdevs.len() == 1 && ports.len() == 1).then(|| &netdevs[0]));
        if let Some((_, ifname)) = nd {
            let nd_dir = root.join("sys/class/net").join(ifname);
            if let Some(v) = read_num::<u64>(root, &nd_dir.join(CARRIER_CHANGES)) {
                port.counters.insert(CARRIER_CHANGES.to_string(), v);
            }
            port.netdev = Some(NetDev {
                name: ifname.clone(),
                operstate: read_attr(root, &nd_dir.join("operstate")),
                // -1 (link down) is not a speed.
                speed_mbps: read_num::<i64>(root, &nd_dir.join("speed"))
                    .and_then(|s| u64::try_from(s).ok()),
                mtu: read_num(root, &nd_dir.join("mtu")),
            });
        }
        nic.ports.push(port);
    }
    nic
}

/// GPUDirect RDMA's kernel side, as NCCL looks for it.
fn gdr(root: &Path) -> Gdr {
    let peermem = read_attr(root, &root.join("sys/module/nvidia_peermem/version")).or_else(|| {
        // A module without a version file is still loaded.
        root.join("sys/module/nvidia_peermem")
            .is_dir()
            .then(|| "loaded".to_string())
    });
    let memory_peers = list(root, &root.join("sys/kernel/mm/memory_peers"), 64)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("nv_mem"))
        .find_map(|n| {
            read_attr(
                root,
                &root
                    .join("sys/kernel/mm/memory_peers")
                    .join(n)
                    .join("version"),
            )
        });
    Gdr {
        peermem,
        memory_peers,
        dmabuf: None,
    }
}
