//! `nodecert inventory`: the node as people read it.

use crate::inventory::Inventory;

pub fn render(inv: &Inventory, simulated: bool) -> String {
    let mut s = String::new();
    if simulated {
        s.push_str("SIMULATED node: not real hardware.\n");
    }
    s.push_str(&format!(
        "{}: {}\ndriver {} (CUDA {}), virtualization: {}{}\n\n",
        inv.hostname,
        inv.summary(),
        inv.driver_version.as_deref().unwrap_or("n/a"),
        inv.cuda_driver_version.as_deref().unwrap_or("n/a"),
        inv.virtualization.mode,
        inv.virtualization
            .hypervisor
            .as_ref()
            .map(|h| format!(" ({h})"))
            .unwrap_or_default()
    ));
    s.push_str(
        "GPU  NAME                         BUS ID        MEMORY     PCIE        NUMA  ECC  UUID\n",
    );
    for g in &inv.gpus {
        let pcie = match (
            g.pcie.gen_current,
            g.pcie.width_current,
            g.pcie.gen_max,
            g.pcie.width_max,
        ) {
            (Some(a), Some(b), Some(c), Some(d)) if (a, b) != (c, d) => {
                format!("Gen{a} x{b}/{c}x{d}")
            }
            (Some(a), Some(b), _, _) => format!("Gen{a} x{b}"),
            _ => "n/a".into(),
        };
        s.push_str(&format!(
            "{:<4} {:<28} {:<13} {:>6.1} GiB {:<11} {:<5} {:<4} {}\n",
            g.index,
            g.name,
            g.pci_bus_id,
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
            g.uuid
        ));
    }
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
                    inv.pair(i, j)
                        .map(|p| p.topo_label())
                        .unwrap_or_else(|| "?".into())
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
        s.push_str(&format!(
            "NVLinks: {links} active, {down} inactive; NVSwitches: {}\n",
            inv.nvswitches
                .map(|x| x.to_string())
                .unwrap_or_else(|| "n/a".into())
        ));
    }
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
            if g.xids.is_empty() { "none".to_string() } else { g.xids.iter().map(|x| x.code.to_string()).collect::<Vec<_>>().join(",") },
            g.pcie.replay_counter.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into()),
            if g.throttle_reasons.is_empty() { "none".to_string() } else { g.throttle_reasons.join(",") }
        ));
    }
    if !inv.unavailable.is_empty() {
        s.push_str(&format!(
            "\nNot available here: {}\n",
            inv.unavailable.join("; ")
        ));
    }
    s
}
