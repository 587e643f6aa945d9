//! NVLink arithmetic over what NVML reported per link: which GPU a link reaches, how many
//! links join a pair, how many NVSwitches there are.

use crate::inventory::{Gpu, Reading, RemoteKind};
use std::collections::BTreeSet;

/// Fill in `remote.gpu` (the CUDA ordinal) for links whose far end is a GPU of this node, and
/// call such an end a GPU when NVML could not say what it was.
pub fn attach_remote_gpus(gpus: &mut [Gpu]) {
    let buses: Vec<String> = gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
    for g in gpus.iter_mut() {
        for l in &mut g.nvlinks {
            let Some(bus) = &l.remote.pci_bus_id else {
                continue;
            };
            if let Some(j) = buses.iter().position(|b| b == bus) {
                if l.remote.kind != RemoteKind::NvSwitch {
                    l.remote.kind = RemoteKind::Gpu;
                    l.remote.gpu = Some(j);
                }
            }
        }
    }
}

fn active_to_switch(g: &Gpu) -> u32 {
    g.nvlinks
        .iter()
        .filter(|l| l.active && l.remote.kind == RemoteKind::NvSwitch)
        .count() as u32
}

/// Active NVLinks between two GPUs: direct links from `a` to `b`, plus, when both reach the
/// NVSwitch fabric, the smaller of their switch link counts (as `nvidia-smi topo -m` shows
/// NV18 on an HGX board).
///
/// 0 where either GPU's NVLink state could not be read: its links were not all read, and its
/// `nvlink_state` says the count is not known.
pub fn pair_nvlinks(gpus: &[Gpu], a: usize, b: usize) -> u32 {
    let unread = |i: usize| gpus.get(i).is_some_and(|g| !g.gives(Reading::NvlinkState));
    if unread(a) || unread(b) {
        return 0;
    }
    let direct = gpus[a]
        .nvlinks
        .iter()
        .filter(|l| l.active && l.remote.gpu == Some(b))
        .count() as u32;
    let switched = active_to_switch(&gpus[a]).min(active_to_switch(&gpus[b]));
    direct + switched
}

/// Distinct NVSwitches at the far end of an active link: a switch whose links are all down does
/// not count, whatever NVML remembers of its address. None when some active link's far end could
/// not be identified and no switch was seen.
pub fn count_nvswitches(gpus: &[Gpu]) -> Option<u32> {
    // A GPU whose links were not all read may reach switches none of the others does.
    if gpus.iter().any(|g| !g.gives(Reading::NvlinkState)) {
        return None;
    }
    let links = gpus.iter().flat_map(|g| &g.nvlinks).filter(|l| l.active);
    let switches: BTreeSet<&str> = links
        .clone()
        .filter(|l| l.remote.kind == RemoteKind::NvSwitch)
        .filter_map(|l| l.remote.pci_bus_id.as_deref())
        .collect();
    let unknown = links.clone().any(|l| l.remote.kind == RemoteKind::Unknown);
    let unnamed_switch = links
        .clone()
        .any(|l| l.remote.kind == RemoteKind::NvSwitch && l.remote.pci_bus_id.is_none());
    match switches.len() {
        0 if unknown || unnamed_switch => None,
        n => Some(n as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{LinkRemote, NvLink, NvLinkErrors};

    fn link(n: u32, active: bool, kind: RemoteKind, bus: &str) -> NvLink {
        NvLink {
            link: n,
            active,
            version: Some(4),
            remote: LinkRemote {
                kind,
                pci_bus_id: Some(bus.into()),
                gpu: None,
            },
            errors: NvLinkErrors::default(),
        }
    }

    fn gpu(bus: &str, nvlinks: Vec<NvLink>) -> Gpu {
        Gpu {
            pci_bus_id: bus.into(),
            nvlinks,
            ..Default::default()
        }
    }

    #[test]
    fn switch_fabric_counts_like_topo_m() {
        // 2 GPUs, 18 links each to 4 switches; GPU 1 has two links down.
        let sw = |l: u32| format!("0000:{:02x}:00.0", 0xf0 + l % 4);
        let g0 = (0..18)
            .map(|l| link(l, true, RemoteKind::NvSwitch, &sw(l)))
            .collect();
        let g1 = (0..18)
            .map(|l| link(l, l < 16, RemoteKind::NvSwitch, &sw(l)))
            .collect();
        let gpus = vec![gpu("0000:18:00.0", g0), gpu("0000:2a:00.0", g1)];
        assert_eq!(pair_nvlinks(&gpus, 0, 1), 16);
        assert_eq!(count_nvswitches(&gpus), Some(4));
        // A GPU whose link state could not be read: neither its pairs' count nor the switches
        // are known.
        let mut unread = gpus.clone();
        unread[1].unavailable.push(Reading::NvlinkState);
        assert_eq!(pair_nvlinks(&unread, 0, 1), 0);
        assert_eq!(pair_nvlinks(&unread, 1, 0), 0);
        assert_eq!(count_nvswitches(&unread), None);
    }

    #[test]
    fn a_switch_reached_only_by_links_that_are_down_is_not_counted() {
        // 4 switches; every link to the fourth is down on both GPUs.
        let sw = |l: u32| format!("0000:{:02x}:00.0", 0xf0 + l % 4);
        let g = || {
            (0..18)
                .map(|l| link(l, l % 4 != 3, RemoteKind::NvSwitch, &sw(l)))
                .collect()
        };
        let gpus = vec![gpu("0000:18:00.0", g()), gpu("0000:2a:00.0", g())];
        assert_eq!(count_nvswitches(&gpus), Some(3));
    }

    #[test]
    fn direct_links_reach_a_gpu_by_bus_id() {
        // An H100 NVL pair: 12 direct links, the remote type not reported.
        let g0 = (0..12)
            .map(|l| link(l, true, RemoteKind::Unknown, "0000:2a:00.0"))
            .collect();
        let g1 = (0..12)
            .map(|l| link(l, l != 3, RemoteKind::Gpu, "0000:18:00.0"))
            .collect();
        let mut gpus = vec![
            gpu("0000:18:00.0", g0),
            gpu("0000:2a:00.0", g1),
            gpu("0000:3b:00.0", vec![]),
        ];
        attach_remote_gpus(&mut gpus);
        assert_eq!(gpus[0].nvlinks[0].remote.kind, RemoteKind::Gpu);
        assert_eq!(gpus[0].nvlinks[0].remote.gpu, Some(1));
        assert_eq!(pair_nvlinks(&gpus, 0, 1), 12);
        assert_eq!(pair_nvlinks(&gpus, 1, 0), 11);
        assert_eq!(pair_nvlinks(&gpus, 0, 2), 0);
        assert_eq!(count_nvswitches(&gpus), Some(0));
    }

    #[test]
    fn unidentified_far_ends_leave_the_switch_count_open() {
        let g0 = vec![link(0, true, RemoteKind::Unknown, "0000:ee:00.0")];
        let mut gpus = vec![gpu("0000:18:00.0", g0)];
        attach_remote_gpus(&mut gpus);
        assert_eq!(count_nvswitches(&gpus), None);
        assert_eq!(count_nvswitches(&[gpu("0000:18:00.0", vec![])]), Some(0));
    }
}
