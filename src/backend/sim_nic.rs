//! The simulated node's network adapters: `[network]` in a node description, one RDMA NIC per
//! GPU or per group of GPUs, and the faults that change them (a port down, a rate trained low,
//! a NIC across the socket, GPUDirect RDMA missing, error counters rising during the run).

use super::sim::{Fault, FaultKind, SimNode};
use crate::inventory::Gpu;
use crate::network::{Fabric, Gdr, NetDev, Nic, NicPort, CARRIER_CHANGES, COUNTERS};
use crate::suite::PciePath;
use serde::{Deserialize, Serialize};

fn yes() -> bool {
    true
}

fn default_fw() -> String {
    "28.39.1002".into()
}

/// `[network]` of a node description.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimNetwork {
    /// RDMA NICs for the GPUs, one port each; GPU g's own NIC is `g * nics / gpus`.
    pub nics: usize,
    /// "InfiniBand", or "Ethernet" for RoCE.
    pub link_layer: String,
    /// Each port's rate, Gb/s (400 for NDR).
    pub rate_gbps: f64,
    /// How a GPU reaches its own NIC ("PIX": one PCIe switch, as on an HGX board); the other
    /// NICs are NODE on its NUMA node and SYS across.
    pub gpu_nic: PciePath,
    /// GPUDirect RDMA: nvidia_peermem loaded and the GPUs support dma-buf (default true).
    #[serde(default = "yes")]
    pub gdr: bool,
    /// Firmware version of every NIC.
    #[serde(default = "default_fw")]
    pub fw_ver: String,
}

/// What a NIC fault adds to a port's counters during a run.
pub const ERROR_RISE: [(&str, u64); 4] = [
    ("symbol_error", 120),
    ("port_rcv_errors", 37),
    ("link_downed", 2),
    (CARRIER_CHANGES, 4),
];

impl SimNetwork {
    /// The description is possible: (key, message) otherwise.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if !(1..=64).contains(&self.nics) {
            return Err((
                "nics".into(),
                format!("nics must be 1 to 64, got {}", self.nics),
            ));
        }
        if !["InfiniBand", "Ethernet"].contains(&self.link_layer.as_str()) {
            return Err((
                "link_layer".into(),
                format!(
                    "link_layer must be \"InfiniBand\" or \"Ethernet\", got {:?}",
                    self.link_layer
                ),
            ));
        }
        if !(self.rate_gbps.is_finite() && self.rate_gbps > 0.0 && self.rate_gbps <= 3200.0) {
            return Err((
                "rate_gbps".into(),
                format!(
                    "rate_gbps must be above 0 and at most 3200, got {}",
                    crate::units::exact(self.rate_gbps)
                ),
            ));
        }
        if self.fw_ver.is_empty() || self.fw_ver.chars().any(|c| c.is_control()) {
            return Err((
                "fw_ver".into(),
                "fw_ver must be a version, without control characters".into(),
            ));
        }
        Ok(())
    }
}

/// The NIC a GPU of the node's numbering uses.
fn own_nic(net: &SimNetwork, gpus: usize, g: usize) -> usize {
    (g * net.nics / gpus.max(1)).min(net.nics - 1)
}

/// The share of the NICs' line rate an all_reduce across nodes reaches as bus bandwidth.
pub const FABRIC_EFFICIENCY: f64 = 0.92;

/// The bus bandwidth, GB/s, a node drives into an all_reduce across nodes: NCCL spreads the
/// traffic evenly over the NICs that are up, so the slowest of them sets the pace for all
/// (8 x 400 Gb/s: 368 GB/s; one NIC trained at 200: 184; one down: 322).
pub fn node_busbw(f: &Fabric) -> f64 {
    let rates: Vec<f64> = f
        .nics
        .iter()
        .flat_map(|n| n.ports.first())
        .filter(|p| p.is_up() == Some(true))
        .filter_map(|p| p.rate_gbps)
        .collect();
    let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
    if rates.is_empty() {
        return 0.0;
    }
    FABRIC_EFFICIENCY * rates.len() as f64 * slowest / 8.0
}

/// The bus after a GPU's: where its NIC sits.
fn next_bus(gpu_bus: &str) -> String {
    let parts: Vec<&str> = gpu_bus.split(':').collect();
    match parts.as_slice() {
        [domain, bus, _] => match u8::from_str_radix(bus, 16) {
            Ok(b) => format!("{domain}:{:02x}:00.0", b.wrapping_add(1)),
            Err(_) => gpu_bus.to_string(),
        },
        _ => gpu_bus.to_string(),
    }
}

/// The node's NICs as the inventory reads them: before the run (`after` false), or after the
/// work, when the counters of a NIC with `nic-errors` have risen.
pub fn fabric(
    node: &SimNode,
    net: &SimNetwork,
    faults: &[&Fault],
    gpus: &[Gpu],
    present: &[usize],
    after: bool,
) -> Fabric {
    let count = node.gpu.count;
    let numa = |g: usize| node.gpu.numa_nodes.get(g).copied();
    let other_numa = |n: Option<i32>| {
        let all: std::collections::BTreeSet<i32> = node.gpu.numa_nodes.iter().copied().collect();
        n.and_then(|x| all.into_iter().find(|y| *y != x))
    };
    let of = |k: FaultKind| faults.iter().copied().filter(move |f| f.kind == k);
    let nic_fault = |k: FaultKind, j: usize| of(k).find(|f| f.nic.unwrap_or(0) == j);
    // A NIC across the socket from its GPU: that GPU's NIC sits on the other NUMA node.
    let moved: Vec<usize> = of(FaultKind::NicAcrossSocket)
        .map(|f| own_nic(net, count, f.gpu.unwrap_or(0)))
        .collect();
    let mut nics = Vec::new();
    for j in 0..net.nics {
        let first = (0..count)
            .find(|g| own_nic(net, count, *g) == j)
            .unwrap_or(0);
        let home = if moved.contains(&j) {
            other_numa(numa(first)).or(numa(first))
        } else {
            numa(first)
        };
        let gpu_paths = gpus
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let g = present.get(i).copied().unwrap_or(i);
                if own_nic(net, count, g) == j && !moved.contains(&j) {
                    Some(net.gpu_nic)
                } else {
                    match (numa(g), home) {
                        (Some(a), Some(b)) if a == b => Some(PciePath::Node),
                        (Some(_), Some(_)) => Some(PciePath::Sys),
                        // Without NUMA nodes the model knows one host bridge per NIC.
                        _ => Some(PciePath::Phb),
                    }
                }
            })
            .collect();
        let down = nic_fault(FaultKind::NicDown, j).is_some();
        let rate = match nic_fault(FaultKind::NicDowntrained, j) {
            Some(f) => net.rate_gbps * f.factor.unwrap_or(0.5),
            None => net.rate_gbps,
        };
        let mut counters: std::collections::BTreeMap<String, u64> =
            COUNTERS.iter().map(|c| (c.to_string(), 0)).collect();
        // A link comes up once at boot.
        counters.insert(CARRIER_CHANGES.into(), 1);
        if after && nic_fault(FaultKind::NicErrors, j).is_some() {
            for (c, rise) in ERROR_RISE {
                *counters.entry(c.to_string()).or_default() += rise;
            }
        }
        let ib = net.link_layer == "InfiniBand";
        let name = node
            .name
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        nics.push(Nic {
            name: format!("mlx5_{j}"),
            pci_bus_id: Some(next_bus(&node.bus_id(first))),
            numa_node: home,
            fw_ver: Some(net.fw_ver.clone()),
            node_guid: Some(format!("b83f:d203:{:04x}:{:04x}", name & 0xffff, j)),
            sys_image_guid: Some(format!("b83f:d203:{:04x}:{:04x}", name & 0xffff, j)),
            ports: vec![NicPort {
                port: 1,
                state: Some(if down { "DOWN" } else { "ACTIVE" }.into()),
                phys_state: Some(if down { "Polling" } else { "LinkUp" }.into()),
                rate_gbps: Some(rate),
                link_layer: Some(net.link_layer.clone()),
                counters,
                netdev: Some(NetDev {
                    name: if ib {
                        format!("ib{j}")
                    } else {
                        format!("eth{j}")
                    },
                    operstate: Some(if down { "down" } else { "up" }.into()),
                    speed_mbps: (!down).then_some((rate * 1000.0) as u64),
                    mtu: Some(if ib { 4092 } else { 9000 }),
                }),
            }],
            gpu_paths,
            acs_redirect: vec![],
            acs_unknown: vec![],
        });
    }
    let gdr = net.gdr && of(FaultKind::NoGdr).next().is_none();
    Fabric {
        nics,
        gdr: Gdr {
            peermem: gdr.then(|| node.driver_version.clone()),
            memory_peers: None,
            dmabuf: Some(gdr),
        },
        unavailable: vec![],
        no_answer: None,
    }
}
