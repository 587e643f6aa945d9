//! `nodecert inventory`: the node as people read it.

use crate::console::visible;
use crate::inventory::{Inventory, NvlsAvailability, Reading};

pub fn render(inv: &Inventory, simulated: bool) -> String {
    let mut s = String::new();
    if simulated {
        s.push_str("SIMULATED node: not real hardware.\n");
    }
    s.push_str(&format!(
        "{}: {}\ndriver {} (CUDA {}), virtualization: {}{}\n\n",
        visible(&inv.hostname),
        visible(&inv.summary()),
        visible(inv.driver_version.as_deref().unwrap_or("n/a")),
        visible(inv.cuda_driver_version.as_deref().unwrap_or("n/a")),
        inv.virtualization.mode,
        inv.virtualization
            .hypervisor
            .as_ref()
            .map(|h| format!(" ({})", visible(h)))
            .unwrap_or_default()
    ));
    s.push_str(
        "GPU  NAME                         BUS ID        MEMORY     PCIE        NUMA  ECC  UUID\n",
    );
    for g in &inv.gpus {
        let pcie = match (g.pcie.trained(), g.pcie.gen_max, g.pcie.width_max) {
            (Some(t), Some(c), Some(d)) if (t.gen, t.width) != (c, d) => {
                format!("Gen{} x{}/{c}x{d}", t.gen, t.width)
            }
            (Some(t), _, _) => format!("Gen{} x{}", t.gen, t.width),
            _ => "n/a".into(),
        };
        s.push_str(&format!(
            "{:<4} {:<28} {:<13} {:>6.1} GiB {:<11} {:<5} {:<4} {}\n",
            g.index,
            visible(&g.name),
            visible(&g.pci_bus_id),
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            pcie,
            g.numa_node
                .map(|x| x.to_string())
                .unwrap_or_else(|| "n/a".into()),
            match g.ecc_enabled {
                Some(true) => "on",
                Some(false) => "off",
                None => "n/a",
            },
            visible(&g.uuid)
        ));
    }
    gpu_details(&mut s, inv);
    let n = inv.gpus.len();
    if n > 0 {
        s.push_str("\nTopology (NV# = NVLinks, else the PCIe path):\n      ");
        for j in 0..n {
            s.push_str(&format!("{:<6}", format!("GPU{j}")));
        }
        s.push('\n');
        for i in 0..n {
            s.push_str(&format!("{:<6}", format!("GPU{i}")));
            for j in 0..n {
                let cell = if i == j {
                    "X".to_string()
                } else {
                    inv.pair_label(i, j)
                };
                s.push_str(&format!("{cell:<6}"));
            }
            s.push('\n');
        }
        let links: usize = inv
            .gpus
            .iter()
            .map(|g| g.nvlinks.iter().filter(|l| l.active).count())
            .sum();
        let down: usize = inv
            .gpus
            .iter()
            .map(|g| g.nvlinks.iter().filter(|l| !l.active).count())
            .sum();
        let unread = inv.links_unread();
        s.push_str(&format!(
            "NVLinks: {links} active, {down} inactive{}; NVSwitches: {}\n",
            match unread.is_empty() {
                true => String::new(),
                false => format!(" (the state of {}'s not read)", unread.join(", ")),
            },
            inv.nvswitches
                .map(|x| x.to_string())
                .unwrap_or_else(|| "n/a".into())
        ));
        s.push_str(&format!("NVLink SHARP (NVLS): {}\n", nvls_text(inv)));
    }
    links(&mut s, inv);
    peer_access(&mut s, inv);
    network(&mut s, inv);
    virtualization(&mut s, inv);
    s.push_str("\nHealth:\n");
    for g in &inv.gpus {
        let unc = [g.ecc.volatile_uncorrected, g.ecc.sram_uncorrected]
            .into_iter()
            .flatten()
            .max();
        s.push_str(&format!(
            "  GPU {}: uncorrectable ECC {}, remapped rows {}, XIDs {}, PCIe replays {}, throttle {}\n",
            g.index,
            unc.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into()),
            match &g.remapped_rows {
                Some(r) if r.pending => "PENDING".to_string(),
                Some(r) if r.failure => "FAILED".to_string(),
                Some(r) => format!("{} corr/{} unc", r.correctable, r.uncorrectable),
                None => "n/a".into(),
            },
            if g.xids.is_empty() { if g.gives(Reading::Xids) { "none" } else { "n/a" }.to_string() } else { g.xids.iter().map(|x| x.code.to_string()).collect::<Vec<_>>().join(",") },
            g.pcie.replay_counter.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into()),
            if g.throttle_reasons.is_empty() { if g.gives(Reading::ThrottleReasons) { "none" } else { "n/a" }.to_string() } else { visible(&g.throttle_reasons.join(",")) }
        ));
    }
    if let Some(m) = &inv.mps {
        // describe() shows hidden characters of the folder escaped.
        s.push_str(&match m.socket {
            true => format!(
                "  MPS: {}; nodecert goes around it, CUDA jobs started here share the GPUs through it\n",
                m.describe()
            ),
            false => format!("  MPS: {}\n", m.describe()),
        });
    }
    if !inv.lost_gpus.is_empty() {
        s.push_str("\nLOST: listed by the driver but no longer answering (fell off the bus):\n");
        for l in &inv.lost_gpus {
            s.push_str(&format!("  {}: {} failed\n", l.label(), visible(&l.detail)));
        }
    }
    let fabric_notes = inv.fabric.iter().flat_map(|f| &f.unavailable);
    let notes: Vec<&String> = inv.unavailable.iter().chain(fabric_notes).collect();
    if !notes.is_empty() {
        s.push_str("\nNot available here:\n");
        for u in notes {
            s.push_str(&format!("  {}\n", visible(u)));
        }
    }
    s
}

/// The NICs: one line each, then each GPU's relation to each, as `nvidia-smi topo -m` prints
/// the NIC columns.
fn network(s: &mut String, inv: &Inventory) {
    let Some(f) = &inv.fabric else {
        s.push_str("\nNICs: not read\n");
        return;
    };
    if let Some(no) = &f.no_answer {
        // Not "no NIC": the NICs are unknown.
        s.push_str(&format!("\nNICs: not read: {}\n", visible(&no.describe())));
    } else if f.nics.is_empty() {
        s.push_str("\nNICs: no RDMA NIC visible\n");
    } else {
        s.push_str("\nNIC      BUS ID        NUMA  PORT  LAYER       STATE           RATE      FIRMWARE    INTERFACE\n");
        for n in &f.nics {
            for p in &n.ports {
                s.push_str(&format!(
                    "{:<8} {:<13} {:<5} {:<5} {:<11} {:<15} {:<9} {:<11} {}\n",
                    visible(&n.name),
                    visible(n.pci_bus_id.as_deref().unwrap_or("n/a")),
                    n.numa_node
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| "n/a".into()),
                    p.port,
                    visible(p.link_layer.as_deref().unwrap_or("n/a")),
                    visible(&p.state_text()),
                    p.rate_gbps
                        .map(|r| format!("{} Gb/s", crate::checks::judge::fmt_num(r)))
                        .unwrap_or_else(|| "n/a".into()),
                    visible(n.fw_ver.as_deref().unwrap_or("n/a")),
                    p.netdev
                        .as_ref()
                        .map(|d| visible(&d.name))
                        .unwrap_or_else(|| "-".into())
                ));
            }
        }
        let gpus = inv.gpus.len();
        s.push_str("GPU-NIC paths (PIX/PXB: GPUDirect RDMA's condition):\n      ");
        for n in &f.nics {
            s.push_str(&format!("{:<9}", visible(&n.name)));
        }
        s.push('\n');
        for g in 0..gpus {
            s.push_str(&format!("{:<6}", format!("GPU{g}")));
            for n in &f.nics {
                let cell = n.path_to(g).map_or("?", |p| p.label());
                s.push_str(&format!("{cell:<9}"));
            }
            s.push('\n');
        }
        let acs: Vec<String> = f
            .nics
            .iter()
            .flat_map(|n| {
                n.acs_redirect
                    .iter()
                    .map(move |b| format!("{b} ({})", n.name))
            })
            .collect();
        if !acs.is_empty() {
            s.push_str(&format!(
                "ACS redirect between GPUs and their NICs: {}\n",
                visible(&acs.join(", "))
            ));
        }
    }
    s.push_str(&format!("GPUDirect RDMA: {}\n", visible(&f.gdr.describe())));
}

/// "available", "not available (GPU 0 reports no multicast support)" or "unknown (...)".
fn nvls_text(inv: &Inventory) -> String {
    match inv.nvls() {
        NvlsAvailability::Available => "available".into(),
        NvlsAvailability::Unavailable(why) => format!("not available ({why})"),
        NvlsAvailability::Unknown(why) => format!("unknown ({why})"),
    }
}

fn or_na<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into())
}

fn on_off(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a",
    }
}

/// One line per GPU with what the table has no room for.
fn gpu_details(s: &mut String, inv: &Inventory) {
    for g in &inv.gpus {
        s.push_str(&format!(
            "  GPU {}: serial {}, VBIOS {}, persistence {}, MIG {}, compute mode {}, other processes {}, memory in use {}, SM {}/{} MHz, power limit {} W, {} °C, CPUs {}, PCIe {}\n",
            g.index,
            visible(g.serial.as_deref().unwrap_or("n/a")),
            visible(g.vbios.as_deref().unwrap_or("n/a")),
            on_off(g.persistence_mode),
            match g.mig_pending {
                Some(to) => format!("{} ({} at next reset)", on_off(g.mig_enabled), on_off(Some(to))),
                None => on_off(g.mig_enabled).to_string(),
            },
            g.compute_mode.map_or("n/a", |m| m.label()),
            match g.processes.as_deref() {
                None => "n/a".to_string(),
                Some([]) => "none".to_string(),
                Some(list) => visible(
                    &list
                        .iter()
                        .map(crate::inventory::GpuProcess::describe)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            },
            or_na(g.memory_used_bytes.map(crate::units::format_bytes)),
            or_na(g.sm_clock_mhz),
            or_na(g.sm_clock_max_mhz),
            or_na(g.power_limit_w.map(|w| format!("{w:.0}"))),
            or_na(g.temperature_c.map(|t| format!("{t:.0}"))),
            visible(g.cpu_affinity.as_deref().unwrap_or("n/a")),
            pcie_reading(&g.pcie),
        ));
    }
}

/// How the PCIe link was read: at rest, and under load where the rest reading was below the
/// maximum (an idle GPU lowers its link).
fn pcie_reading(p: &crate::inventory::PcieLink) -> String {
    let at_rest = match (p.gen_current, p.width_current) {
        (Some(g), Some(w)) => format!("Gen{g} x{w} at rest"),
        _ => return "n/a".into(),
    };
    match (p.gen_loaded, p.width_loaded) {
        (Some(g), Some(w)) => format!("Gen{g} x{w} under load ({at_rest})"),
        _ if p.below_max_at_rest() => format!("{at_rest}, not read under load"),
        _ => at_rest,
    }
}

/// Each GPU's links, grouped by where they lead.
fn links(s: &mut String, inv: &Inventory) {
    let unread = |g: &crate::inventory::Gpu| !g.gives(crate::inventory::Reading::NvlinkState);
    if inv.gpus.iter().all(|g| g.nvlinks.is_empty() && !unread(g)) {
        return;
    }
    s.push_str("\nLinks:\n");
    for g in &inv.gpus {
        let mut groups: Vec<(String, usize, usize)> = Vec::new();
        for l in &g.nvlinks {
            let to = match (l.remote.kind, l.remote.gpu) {
                (_, Some(j)) => format!("GPU{j}"),
                (crate::inventory::RemoteKind::NvSwitch, _) => "NVSwitch".into(),
                (crate::inventory::RemoteKind::Gpu, None) => "a GPU outside this list".into(),
                _ => "unknown".into(),
            };
            match groups.iter_mut().find(|x| x.0 == to) {
                Some(x) => {
                    x.1 += usize::from(l.active);
                    x.2 += usize::from(!l.active);
                }
                None => groups.push((to, usize::from(l.active), usize::from(!l.active))),
            }
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(to, a, d)| {
                if *d > 0 {
                    format!("{a} active + {d} down to {to}")
                } else {
                    format!("{a} to {to}")
                }
            })
            .collect();
        let version = g.nvlinks.iter().find_map(|l| l.version);
        let unread = unread(g);
        s.push_str(&format!(
            "  GPU {}: {}{}{}\n",
            g.index,
            match (parts.is_empty(), unread) {
                (true, true) => "link state not available".to_string(),
                (true, false) => "no NVLink".to_string(),
                (false, _) => parts.join(", "),
            },
            version
                .map(|v| format!(" (NVLink {v})"))
                .unwrap_or_default(),
            if unread && !parts.is_empty() {
                "; the state of its other links not available"
            } else {
                ""
            }
        ));
    }
}

/// Pairs without peer access, or a line saying all have it.
fn peer_access(s: &mut String, inv: &Inventory) {
    if inv.pairs.is_empty() {
        return;
    }
    let none: Vec<String> = inv
        .pairs
        .iter()
        .filter(|p| p.p2p.usable() == Some(false))
        .map(|p| format!("GPU{}-GPU{}", p.a, p.b))
        .collect();
    let unknown = inv
        .pairs
        .iter()
        .filter(|p| p.p2p.usable().is_none())
        .count();
    s.push_str(&match (none.is_empty(), unknown) {
        (true, 0) => "Peer access: every pair\n".to_string(),
        (true, u) => format!("Peer access: not reported for {u} pairs\n"),
        (false, _) => format!("Peer access: none between {}\n", none.join(", ")),
    });
}

fn virtualization(s: &mut String, inv: &Inventory) {
    let v = &inv.virtualization;
    s.push_str(&format!(
        "\nVirtualization: {}{}; IOMMU groups {}; bridges with ACS redirect: {}\n",
        v.mode,
        v.hypervisor
            .as_ref()
            .map(|h| format!(" ({})", visible(h)))
            .unwrap_or_default(),
        or_na(v.iommu_groups),
        match (
            v.acs_enabled_bridges.is_empty(),
            v.acs_unknown_bridges.is_empty()
        ) {
            (true, true) => "none".to_string(),
            (false, true) => visible(&v.acs_enabled_bridges.join(", ")),
            // Not read is not known to be off.
            (on, false) => format!(
                "{}; not readable (needs root): {}",
                if on {
                    "none of those read".to_string()
                } else {
                    visible(&v.acs_enabled_bridges.join(", "))
                },
                visible(&v.acs_unknown_bridges.join(", "))
            ),
        }
    ));
    for w in &v.witnesses {
        s.push_str(&format!(
            "  {}: {}\n",
            visible(&w.source),
            visible(&w.finding)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::{self, Fault, SimBackend};
    use crate::backend::Backend;

    fn sim_inventory(node: &str, faults: &[&str]) -> Inventory {
        let faults = faults
            .iter()
            .map(|f| Fault::parse(f).expect("fault"))
            .collect();
        let mut b = SimBackend::new(sim::load_node(node).expect("node"), faults, 1).expect("sim");
        b.inventory().expect("inventory")
    }

    #[test]
    fn nics_that_did_not_answer_are_said_not_read_never_absent() {
        let mut inv = sim_inventory("h200-vm-1", &[]);
        let no = crate::network::NoAnswer {
            file: "/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error".into(),
            nic: Some("mlx5_3".into()),
            port: Some(1),
            waited_s: 5.0,
        };
        inv.fabric = Some(crate::network::Fabric {
            no_answer: Some(no.clone()),
            ..Default::default()
        });
        let text = render(&inv, true);
        assert!(
            text.contains(&format!("\nNICs: not read: {}\n", no.describe())),
            "{text}"
        );
        assert!(!text.contains("no RDMA NIC"), "{text}");
    }

    /// The module versions GPUDirect RDMA names are read from sysfs (or a node file): they
    /// reach the terminal shown, not as escapes it would act on.
    #[test]
    fn gpudirect_versions_reach_the_terminal_shown() {
        let mut inv = sim_inventory("h200-vm-1", &[]);
        inv.fabric = Some(crate::network::Fabric {
            gdr: crate::network::Gdr {
                peermem: Some("580\u{1b}]52;c;x\u{7}\u{202e}".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        let text = render(&inv, true);
        let line = text
            .lines()
            .find(|l| l.starts_with("GPUDirect RDMA: "))
            .unwrap();
        assert!(
            !line.contains('\u{1b}') && !line.contains('\u{7}') && !line.contains('\u{202e}'),
            "{line:?}"
        );
        assert!(line.contains("580"), "{line:?}");
    }

    /// A GPU whose link state was not read is not shown as one without NVLink: its line says
    /// so, and its pairs' cells are unknown.
    #[test]
    fn a_gpu_whose_link_state_was_not_read_is_not_shown_without_nvlink() {
        let mut inv = sim_inventory("h100-sxm-8", &[]);
        crate::backend::sim::hide_for_tests(
            &mut inv.gpus[3],
            crate::inventory::Reading::NvlinkState,
        );
        let text = render(&inv, true);
        assert!(
            text.contains("  GPU 3: link state not available\n"),
            "{text}"
        );
        assert!(
            text.contains("NVLinks: 126 active, 0 inactive (the state of GPU 3's not read); "),
            "{text}"
        );
        assert!(
            text.contains("  GPU 4: 18 to NVSwitch (NVLink 4)\n"),
            "{text}"
        );
        let row = text.lines().find(|l| l.starts_with("GPU3  ")).unwrap();
        assert_eq!(
            row.split_whitespace().filter(|c| *c == "?").count(),
            7,
            "{row}"
        );
        crate::backend::sim::hide_for_tests(
            &mut inv.gpus[4],
            crate::inventory::Reading::NvlinkState,
        );
        inv.gpus[4].nvlinks = sim_inventory("h100-sxm-8", &[]).gpus[4].nvlinks[..2].to_vec();
        let text = render(&inv, true);
        assert!(
            text.contains(
                "  GPU 4: 2 to NVSwitch (NVLink 4); the state of its other links not available\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn h200_vm_summary() {
        insta::assert_snapshot!(render(&sim_inventory("h200-vm-1", &[]), true));
    }

    #[test]
    fn pcie_box_with_an_xid_and_acs() {
        let mut inv = sim_inventory("l40s-pcie-4", &["xid:gpu=2,code=79"]);
        inv.virtualization.acs_enabled_bridges = vec!["0000:17:08.0".into()];
        insta::assert_snapshot!(render(&inv, true));
    }

    /// A bridge whose ACS could not be read is said so, never counted among those without.
    #[test]
    fn acs_not_read_is_not_none() {
        let mut inv = sim_inventory("l40s-pcie-4", &[]);
        inv.virtualization.acs_unknown_bridges = vec!["0000:17:08.0".into()];
        let text = render(&inv, true);
        assert!(
            text.contains(
                "bridges with ACS redirect: none of those read; not readable (needs root): \
                 0000:17:08.0\n"
            ),
            "{text}"
        );
        inv.virtualization.acs_enabled_bridges = vec!["0000:16:01.0".into()];
        let text = render(&inv, true);
        assert!(
            text.contains(
                "bridges with ACS redirect: 0000:16:01.0; not readable (needs root): 0000:17:08.0\n"
            ),
            "{text}"
        );
        inv.virtualization.acs_unknown_bridges.clear();
        assert!(render(&inv, true).contains("bridges with ACS redirect: 0000:16:01.0\n"));
    }

    #[test]
    fn nvswitch_links_are_grouped() {
        let inv = sim_inventory("h100-sxm-8", &["nvlink-down:gpu=3", "nvlink-down:gpu=3"]);
        let text = render(&inv, true);
        assert!(
            text.contains("GPU 3: 16 active + 2 down to NVSwitch (NVLink 4)"),
            "{text}"
        );
        assert!(text.contains("GPU0  X     NV18"), "{text}");
    }

    #[test]
    fn nvls_is_stated_with_its_cause() {
        let text = render(&sim_inventory("h100-sxm-8", &[]), true);
        assert!(text.contains("NVLink SHARP (NVLS): available\n"), "{text}");
        let text = render(&sim_inventory("h100-sxm-8", &["nvls-unavailable"]), true);
        assert!(
            text.contains("NVLink SHARP (NVLS): not available (GPU 0: fabric manager not running)"),
            "{text}"
        );
        let text = render(&sim_inventory("a100-sxm-80gb-8", &[]), true);
        assert!(
            text.contains(
                "NVLink SHARP (NVLS): not available (GPU 0 reports no multicast support)"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_lost_gpu_is_listed_apart() {
        let inv = sim_inventory("h100-sxm-8", &["gpu-lost:gpu=5"]);
        assert_eq!(inv.gpus.len(), 7);
        let text = render(&inv, true);
        assert!(
            text.contains("LOST: listed by the driver but no longer answering")
                && text.contains("  NVML GPU 5: nvmlDeviceGetHandleByIndex(5) failed\n"),
            "{text}"
        );
    }

    #[test]
    fn unread_xids_and_throttle_reasons_read_n_a_not_none() {
        let mut inv = sim_inventory("h200-vm-1", &[]);
        let text = render(&inv, true);
        assert!(
            text.contains("XIDs none") && text.contains("throttle none"),
            "{text}"
        );
        inv.gpus[0].unavailable = vec![Reading::Xids, Reading::ThrottleReasons];
        let text = render(&inv, true);
        assert!(
            text.contains("XIDs n/a") && text.contains("throttle n/a"),
            "{text}"
        );
    }
}
