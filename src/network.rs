//! The node's network adapters as the inventory records them: the RDMA NICs (InfiniBand, and
//! RoCE on Ethernet) that multi-node jobs ride, their ports and error counters, each GPU's PCIe
//! relation to each NIC (as `nvidia-smi topo -m` prints it), the bridges between them whose
//! ACS redirects peer traffic, and whether GPUDirect RDMA can work. The real backend reads them
//! from sysfs ([`crate::platform::nic`]); a simulated node from its description. Every reading
//! the platform does not give is `None`, with the reason in [`Fabric::unavailable`].

use crate::suite::PciePath;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The port error counters nodecert reads (the kernel's
/// `Documentation/ABI/stable/sysfs-class-infiniband`), and `carrier_changes` of the port's
/// network interface (a link that went down and up). A rise of any during the run is judged.
pub const COUNTERS: [&str; 10] = [
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
];

/// The width in bits of a port counter as the adapter keeps it (the InfiniBand PortCounters
/// attribute): it stops at its largest value rather than wrap, so a counter found there before
/// the run cannot show a rise. None: 64 bits (the extended counters, `carrier_changes`).
pub fn counter_bits(name: &str) -> Option<u32> {
    match name {
        "symbol_error"
        | "port_rcv_errors"
        | "port_xmit_discards"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors" => Some(16),
        "link_downed"
        | "link_error_recovery"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors"
        | "VL15_dropped" => Some(8),
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => Some(4),
        _ => None,
    }
}

/// Whether `value` is the counter's largest: saturated, it can no longer rise.
pub fn saturated(name: &str, value: u64) -> bool {
    counter_bits(name).is_some_and(|b| value >= (1u64 << b) - 1)
}

/// The network interface's counter of lost and regained carrier, judged like the port counters.
pub const CARRIER_CHANGES: &str = "carrier_changes";

/// What the node's network adapters are.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Fabric {
    /// RDMA devices (`/sys/class/infiniband`), by name.
    pub nics: Vec<Nic>,
    /// What GPUDirect RDMA would use.
    pub gdr: Gdr,
    /// Readings the platform did not give, as "mlx5_0 port 1 rate: not readable".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
    /// A read that did not answer in time (a NIC whose firmware hangs): the NICs were then not
    /// read, and what this holds is not known, never healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_answer: Option<NoAnswer>,
}

/// A read of the NIC reader that did not answer within its deadline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NoAnswer {
    /// The file (or folder) being read, as the node names it:
    /// "/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error".
    pub file: String,
    /// The RDMA device it belongs to, where it is one's ("mlx5_3").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// Its port, where the file is a port's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// How long it was waited for, seconds.
    pub waited_s: f64,
}

impl NoAnswer {
    /// "the NICs did not answer within 5 s: reading mlx5_3 port 1 (/sys/class/infiniband/...)
    /// never returned (...)".
    pub fn describe(&self) -> String {
        let whose = match (&self.nic, self.port) {
            (Some(n), Some(p)) => format!("{n} port {p} ({})", self.file),
            (Some(n), None) => format!("{n} ({})", self.file),
            _ => self.file.clone(),
        };
        format!(
            "the NICs did not answer within {} s: reading {whose} never returned (the adapter's firmware or driver is hung: see the kernel log, then reset the adapter or reboot the node)",
            self.waited_s
        )
    }
}

/// One RDMA device.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Nic {
    /// The kernel's name, "mlx5_0".
    pub name: String,
    /// Normalised PCI bus id of its function, "0000:19:00.0".
    pub pci_bus_id: Option<String>,
    /// NUMA node of its PCI function (None: not reported).
    pub numa_node: Option<i32>,
    /// Firmware version, "28.39.1002".
    pub fw_ver: Option<String>,
    /// Node and system image GUIDs, as the kernel writes them ("b83f:d203:00a1:2b3c").
    pub node_guid: Option<String>,
    pub sys_image_guid: Option<String>,
    pub ports: Vec<NicPort>,
    /// Its PCIe relation to each GPU, by GPU index (None: not known).
    pub gpu_paths: Vec<Option<PciePath>>,
    /// PCIe bridges on the path between this NIC and a GPU that is no farther than PXB from
    /// it, whose ACS redirects peer requests or completions upstream (GPUDirect traffic then
    /// detours through the root complex), by bus id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acs_redirect: Vec<String>,
    /// Bridges on those paths whose ACS could not be read (their extended config space needs
    /// root): not known to be off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acs_unknown: Vec<String>,
}

impl Nic {
    /// Its PCIe relation to GPU `g`, where known.
    pub fn path_to(&self, g: usize) -> Option<PciePath> {
        self.gpu_paths.get(g).copied().flatten()
    }

    /// The link layer of its first port, where the kernel names one nodecert knows.
    pub fn link_layer(&self) -> Option<crate::suite::LinkLayer> {
        self.ports
            .first()
            .and_then(|p| p.link_layer.as_deref())
            .and_then(crate::suite::LinkLayer::of_kernel)
    }
}

/// One port of an RDMA device.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct NicPort {
    /// The kernel's port number, from 1.
    pub port: u32,
    /// Logical state, "ACTIVE", "DOWN", "INIT", "ARMED" (the kernel writes "4: ACTIVE").
    pub state: Option<String>,
    /// Physical state, "LinkUp", "Disabled", "Polling" (the kernel writes "5: LinkUp").
    pub phys_state: Option<String>,
    /// Signalling rate, Gb/s (the kernel writes "400 Gb/sec (4X NDR)").
    pub rate_gbps: Option<f64>,
    /// "InfiniBand" or "Ethernet" (RoCE).
    pub link_layer: Option<String>,
    /// Error counters by name ([`COUNTERS`], and [`CARRIER_CHANGES`] from its interface).
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    /// Its network interface, when it has one ("ib0", "enp25s0np0").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<NetDev>,
}

impl NicPort {
    /// The port carries traffic: logically active and physically up.
    pub fn is_up(&self) -> Option<bool> {
        match (&self.state, &self.phys_state) {
            (Some(s), Some(p)) => {
                Some(s.eq_ignore_ascii_case("ACTIVE") && p.eq_ignore_ascii_case("LinkUp"))
            }
            (Some(s), None) if !s.eq_ignore_ascii_case("ACTIVE") => Some(false),
            _ => None,
        }
    }

    /// "ACTIVE/LinkUp", with "?" for what could not be read.
    pub fn state_text(&self) -> String {
        format!(
            "{}/{}",
            self.state.as_deref().unwrap_or("?"),
            self.phys_state.as_deref().unwrap_or("?")
        )
    }
}

/// A port's network interface (`/sys/class/net/<name>`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct NetDev {
    pub name: String,
    /// "up", "down", ...
    pub operstate: Option<String>,
    /// Mb/s as the kernel reports it (None: not reported, or -1 while the link is down).
    pub speed_mbps: Option<u64>,
    pub mtu: Option<u32>,
}

/// What GPUDirect RDMA would use, as NCCL tests it (`net_ib/gdr.cc`): the `nvidia_peermem`
/// module, the older peer-memory interface, or dma-buf.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Gdr {
    /// Version of the loaded `nvidia_peermem` module (None: not loaded).
    pub peermem: Option<String>,
    /// Version of the peer-memory interface's NVIDIA client (`/sys/kernel/mm/memory_peers/
    /// nv_mem*/version`; None: absent).
    pub memory_peers: Option<String>,
    /// Whether the GPUs support dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED; None: not read).
    pub dmabuf: Option<bool>,
}

impl Gdr {
    /// Some(true) when one way is there, Some(false) when none is and dma-buf is known to be
    /// unsupported, None when the peer-memory modules are absent and dma-buf support was not
    /// read (unknown, never healthy).
    pub fn ready(&self) -> Option<bool> {
        if self.peermem.is_some() || self.memory_peers.is_some() || self.dmabuf == Some(true) {
            Some(true)
        } else {
            self.dmabuf
        }
    }

    /// "nvidia_peermem 580.95.05", "dma-buf", or why not.
    pub fn describe(&self) -> String {
        let mut ways = Vec::new();
        if let Some(v) = &self.peermem {
            ways.push(format!("nvidia_peermem {v}"));
        }
        if let Some(v) = &self.memory_peers {
            ways.push(format!("peer-memory client {v}"));
        }
        if self.dmabuf == Some(true) {
            ways.push("dma-buf".into());
        }
        if !ways.is_empty() {
            return ways.join(", ");
        }
        match self.dmabuf {
            Some(_) => "none: nvidia_peermem not loaded, no peer-memory client, no dma-buf support".into(),
            None => "not established: nvidia_peermem not loaded, no peer-memory client, dma-buf support not read here".into(),
        }
    }
}

/// Where a PCI function sits: its host bridge ("pci0000:15") and the functions from the root
/// port down to itself, as its sysfs path names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciPlace {
    pub host_bridge: String,
    /// Bus ids from the root port to the function itself (the last).
    pub chain: Vec<String>,
    pub numa_node: Option<i32>,
}

/// How two PCI functions connect, as `nvidia-smi topo -m` names it: through one PCIe switch
/// (PIX; two functions of one device too), several (PXB), their host bridge (PHB), host bridges
/// of one NUMA node (NODE), or the link between NUMA nodes (SYS). A switch is an upstream port
/// with its downstream ports: two bridges on the path.
pub fn relation(a: &PciPlace, b: &PciPlace) -> Option<PciePath> {
    if a.host_bridge != b.host_bridge {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x == y => Some(PciePath::Node),
            (Some(_), Some(_)) => Some(PciePath::Sys),
            _ => None,
        };
    }
    let common = a
        .chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count();
    // Only the host bridge is shared: different root ports.
    if common == 0 {
        return Some(PciePath::Phb);
    }
    // The rest of each chain below the shared part, less the function itself: the bridges on
    // that side, one switch per two (a downstream port, then the next switch's upstream port).
    let below = |chain: &[String]| chain.len().saturating_sub(common + 1);
    let a_side = below(&a.chain);
    let b_side = below(&b.chain);
    // The shared switch (or the shared device, for two functions of one), and one more for every
    // two bridges on either side beyond its downstream port.
    let extra = a_side.saturating_sub(1).div_ceil(2) + b_side.saturating_sub(1).div_ceil(2);
    Some(if extra == 0 {
        PciePath::Pix
    } else {
        PciePath::Pxb
    })
}

impl Fabric {
    /// The NIC nearest GPU `g` among `nics` (by relation, then name), and its relation; None
    /// when no relation to it is known.
    pub fn nearest<'a>(nics: &[&'a Nic], g: usize) -> Option<(&'a Nic, PciePath)> {
        nics.iter()
            .filter_map(|n| Some((*n, n.path_to(g)?)))
            .min_by(|(a, pa), (b, pb)| pa.cmp(pb).then_with(|| a.name.cmp(&b.name)))
    }
}

/// Parse the kernel's rate text, "400 Gb/sec (4X NDR)" or "25 Gb/sec (1X EDR)", into Gb/s.
pub fn parse_rate(text: &str) -> Option<f64> {
    let num = text.split_whitespace().next()?;
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// The name part of the kernel's "4: ACTIVE" or "5: LinkUp".
pub fn state_name(text: &str) -> String {
    match text.split_once(':') {
        Some((_, name)) => name.trim().to_string(),
        None => text.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(hb: &str, chain: &[&str], numa: i32) -> PciPlace {
        PciPlace {
            host_bridge: hb.into(),
            chain: chain.iter().map(|s| s.to_string()).collect(),
            numa_node: Some(numa),
        }
    }

    #[test]
    fn relations_count_switches_as_nvidia_smi_does() {
        // One switch: upstream 16:00.0, downstream ports 17:00.0 (GPU) and 17:01.0 (NIC).
        let gpu = place(
            "pci0000:15",
            &["15:01.0", "16:00.0", "17:00.0", "18:00.0"],
            0,
        );
        let nic = place(
            "pci0000:15",
            &["15:01.0", "16:00.0", "17:01.0", "19:00.0"],
            0,
        );
        assert_eq!(relation(&gpu, &nic), Some(PciePath::Pix));
        // Two functions of one device.
        let nic1 = place(
            "pci0000:15",
            &["15:01.0", "16:00.0", "17:01.0", "19:00.1"],
            0,
        );
        assert_eq!(relation(&nic, &nic1), Some(PciePath::Pix));
        // The NIC behind a second switch below the first: two switches.
        let deep = place(
            "pci0000:15",
            &[
                "15:01.0", "16:00.0", "17:02.0", "1a:00.0", "1b:00.0", "1c:00.0",
            ],
            0,
        );
        assert_eq!(relation(&gpu, &deep), Some(PciePath::Pxb));
        assert_eq!(relation(&deep, &gpu), Some(PciePath::Pxb));
        // Another root port of the same host bridge.
        let other_rp = place("pci0000:15", &["15:02.0", "20:00.0"], 0);
        assert_eq!(relation(&gpu, &other_rp), Some(PciePath::Phb));
        // Another host bridge: NODE within a NUMA node, SYS across, unknown without NUMA.
        let same_numa = place("pci0000:25", &["25:01.0", "29:00.0"], 0);
        let other_numa = place("pci0000:95", &["95:01.0", "99:00.0"], 1);
        assert_eq!(relation(&gpu, &same_numa), Some(PciePath::Node));
        assert_eq!(relation(&gpu, &other_numa), Some(PciePath::Sys));
        let unknown = PciPlace {
            numa_node: None,
            ..other_numa.clone()
        };
        assert_eq!(relation(&gpu, &unknown), None);
    }

    #[test]
    fn kernel_texts_read_into_values() {
        assert_eq!(parse_rate("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate("-1 Gb/sec"), None);
        assert_eq!(state_name("4: ACTIVE"), "ACTIVE");
        assert_eq!(state_name("5: LinkUp"), "LinkUp");
        assert_eq!(state_name("DOWN"), "DOWN");
    }

    #[test]
    fn a_port_is_up_only_when_active_and_linked() {
        let port = |s: Option<&str>, p: Option<&str>| NicPort {
            state: s.map(String::from),
            phys_state: p.map(String::from),
            ..Default::default()
        };
        assert_eq!(port(Some("ACTIVE"), Some("LinkUp")).is_up(), Some(true));
        assert_eq!(port(Some("ACTIVE"), Some("Polling")).is_up(), Some(false));
        assert_eq!(port(Some("DOWN"), None).is_up(), Some(false));
        assert_eq!(port(Some("ACTIVE"), None).is_up(), None);
        assert_eq!(port(None, Some("LinkUp")).is_up(), None);
    }

    #[test]
    fn gpudirect_rdma_is_ready_by_any_way_and_unknown_is_not_ready() {
        let mut g = Gdr::default();
        assert_eq!(g.ready(), None);
        assert!(g.describe().contains("not read here"));
        g.dmabuf = Some(false);
        assert_eq!(g.ready(), Some(false));
        g.peermem = Some("580.95.05".into());
        assert_eq!(g.ready(), Some(true));
        assert_eq!(g.describe(), "nvidia_peermem 580.95.05");
        let d = Gdr {
            dmabuf: Some(true),
            ..Default::default()
        };
        assert_eq!(d.ready(), Some(true));
        let m = Gdr {
            memory_peers: Some("1.0".into()),
            dmabuf: Some(false),
            ..Default::default()
        };
        assert_eq!(m.ready(), Some(true));
    }

    #[test]
    fn the_nearest_nic_is_the_closest_relation_then_the_first_name() {
        let nic = |name: &str, paths: Vec<Option<PciePath>>| Nic {
            name: name.into(),
            gpu_paths: paths,
            ..Default::default()
        };
        let a = nic("mlx5_1", vec![Some(PciePath::Sys), Some(PciePath::Pix)]);
        let b = nic("mlx5_0", vec![Some(PciePath::Pix), None]);
        let c = nic("mlx5_2", vec![Some(PciePath::Pix), Some(PciePath::Pix)]);
        let all = [&a, &b, &c];
        assert_eq!(
            Fabric::nearest(&all, 0).map(|(n, p)| (n.name.as_str(), p)),
            Some(("mlx5_0", PciePath::Pix))
        );
        assert_eq!(
            Fabric::nearest(&all, 1).map(|(n, _)| n.name.as_str()),
            Some("mlx5_1")
        );
        assert_eq!(Fabric::nearest(&all, 2), None);
        assert_eq!(Fabric::nearest(&[&b], 1), None);
    }
}
