//! Topology: GPU count, model and memory; NVLinks between each pair; NVSwitch; PCIe link of each
//! GPU; NUMA affinity. Judged from the inventory, which is the measurement.

use super::judge::finding;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Status};
use crate::inventory::PcieLink;

pub struct Topology;

impl Check for Topology {
    fn id(&self) -> String {
        "topology".into()
    }
    fn kind(&self) -> &'static str {
        "topology"
    }
    fn title(&self) -> String {
        "Topology".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = ctx.inventory.gpus.len();
        Ok(vec![format!(
            "compare {n} GPUs and {} pairs with the expected topology",
            ctx.inventory.pairs.len()
        )])
    }

    fn measure(
        &self,
        _: &Ctx,
        _: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        progress(1, 1);
        Ok(Measured::default())
    }

    fn samples(&self, _gpus: usize) -> (u64, String) {
        // Reads the inventory (or earlier records): no samples of its own.
        (0, String::new())
    }

    fn evaluate(&self, ctx: &Ctx, _: &Measured) -> Vec<Finding> {
        let inv = ctx.inventory;
        let exp = &ctx.suite.node;
        let topo = &ctx.suite.topology;
        let mut out = Vec::new();
        let n = inv.gpus.len();
        if let Some(want) = exp.gpu_count {
            let st = if n == want {
                Status::Pass
            } else {
                Status::Fail
            };
            let reason = if n == want {
                format!("{n} GPUs present")
            } else if n < want {
                let found: Vec<String> = inv.gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
                format!(
                    "{} of {want} GPUs missing: only {n} found (bus ids {})",
                    want - n,
                    if found.is_empty() {
                        "none".into()
                    } else {
                        found.join(", ")
                    }
                )
            } else {
                format!("{n} GPUs found, {want} expected")
            };
            out.push(finding(
                st,
                "node",
                format!("{n} GPUs"),
                format!("{want} GPUs"),
                reason,
            ));
        }
        for g in &inv.gpus {
            let who = format!("GPU {}", g.index);
            if let Some(model) = &exp.gpu_model {
                let ok = g.name.to_lowercase().contains(&model.to_lowercase());
                out.push(finding(
                    if ok { Status::Pass } else { Status::Fail },
                    &who,
                    &g.name,
                    format!("a {model}"),
                    if ok {
                        format!("{who} is an {}", g.name)
                    } else {
                        format!("{who} is an {}, expected a {model}", g.name)
                    },
                ));
            }
            if let Some(min) = exp.memory_gib_min {
                let gib = g.memory_bytes as f64 / (1u64 << 30) as f64;
                let ok = gib >= min;
                out.push(finding(
                    if ok { Status::Pass } else { Status::Fail },
                    &who,
                    format!("{gib:.1} GiB"),
                    format!(">= {min} GiB"),
                    format!(
                        "{who} has {gib:.1} GiB of memory{}",
                        if ok {
                            String::new()
                        } else {
                            format!(", expected at least {min} GiB")
                        }
                    ),
                ));
            }
            if topo.pcie_gen.is_some() || topo.pcie_width.is_some() {
                out.push(pcie_finding(&who, &g.pcie, topo.pcie_gen, topo.pcie_width));
            }
            if let Some(numa) = &topo.numa_nodes {
                if let Some(want) = numa.get(g.index) {
                    match g.numa_node {
                        Some(found) => out.push(finding(
                            if found == *want {
                                Status::Pass
                            } else {
                                Status::Fail
                            },
                            &who,
                            format!("NUMA {found}"),
                            format!("NUMA {want}"),
                            if found == *want {
                                format!("{who} on NUMA node {found}")
                            } else {
                                format!("{who} is on NUMA node {found}, expected {want}")
                            },
                        )),
                        None => out.push(finding(
                            Status::Skip,
                            &who,
                            "not available here",
                            format!("NUMA {want}"),
                            format!("{who} NUMA node: not available here"),
                        )),
                    }
                }
            }
        }
        for p in &inv.pairs {
            let Some(want) = topo.expected_links(p.a, p.b) else {
                continue;
            };
            let who = format!("GPU {} - GPU {}", p.a, p.b);
            let found = p.topo_label();
            let ok = p.nvlinks == want;
            let reason = if ok {
                format!("{who}: {found}")
            } else {
                let mut down = Vec::new();
                for gi in [p.a, p.b] {
                    if let Some(g) = inv.gpus.get(gi) {
                        for l in g.nvlinks.iter().filter(|l| !l.active) {
                            let remote_ok = l.remote.gpu.is_none_or(|r| r == p.a || r == p.b);
                            if remote_ok {
                                down.push(format!("GPU {gi} link {}", l.link));
                            }
                        }
                    }
                }
                let detail = if down.is_empty() {
                    String::new()
                } else {
                    format!(" (inactive: {})", down.join(", "))
                };
                if want == 0 {
                    format!("{who}: {} NVLinks active, expected none", p.nvlinks)
                } else {
                    format!(
                        "{who}: {} NVLinks active, expected {want} (NV{want}){detail}",
                        p.nvlinks
                    )
                }
            };
            out.push(finding(
                if ok { Status::Pass } else { Status::Fail },
                who,
                found,
                if want == 0 {
                    "no NVLink".to_string()
                } else {
                    format!("NV{want}")
                },
                reason,
            ));
        }
        if let Some(want) = topo.nvswitch {
            match inv.nvswitches {
                Some(s) => {
                    let has = s > 0;
                    out.push(finding(
                        if has == want {
                            Status::Pass
                        } else {
                            Status::Fail
                        },
                        "node",
                        format!("{s} NVSwitches"),
                        if want { "NVSwitch" } else { "no NVSwitch" },
                        match (want, has) {
                            (true, true) => {
                                format!("{s} NVSwitches seen at the far end of NVLinks")
                            }
                            (true, false) => {
                                "no NVSwitch seen, expected the GPUs to connect through NVSwitch"
                                    .into()
                            }
                            (false, true) => format!("{s} NVSwitches seen, expected none"),
                            (false, false) => "no NVSwitch, as expected".into(),
                        },
                    ));
                }
                None => out.push(finding(
                    Status::Skip,
                    "node",
                    "not available here",
                    if want { "NVSwitch" } else { "no NVSwitch" },
                    "NVSwitch presence: not available here",
                )),
            }
        }
        if out.is_empty() {
            out.push(finding(
                Status::Skip,
                "node",
                "-",
                "-",
                "the suite states no topology to compare with",
            ));
        }
        out
    }
}

/// One GPU's PCIe link against the suite. A reading at rest below the link's maximum may only be
/// the GPU saving power, so it fails only when it was read under load (or the maximum itself is
/// short of the suite); otherwise it warns.
fn pcie_finding(
    who: &str,
    link: &PcieLink,
    want_gen: Option<u32>,
    want_width: Option<u32>,
) -> Finding {
    let show = |x: Option<u32>| x.map(|x| x.to_string()).unwrap_or_else(|| "?".into());
    let want = format!("Gen{} x{}", show(want_gen), show(want_width));
    let Some(t) = link.trained() else {
        return finding(
            Status::Skip,
            who,
            "not available here",
            want,
            format!("{who} PCIe link generation/width: not available here"),
        );
    };
    let meets = |gen: u32, width: u32| {
        want_gen.is_none_or(|w| gen >= w) && want_width.is_none_or(|w| width >= w)
    };
    let found = format!("Gen{} x{}", t.gen, t.width);
    let expected = format!("at least {want}");
    let under_load = if link.gen_loaded.is_some() {
        " under load"
    } else {
        ""
    };
    if meets(t.gen, t.width) {
        return finding(
            Status::Pass,
            who,
            &found,
            expected,
            format!("{who} PCIe link {found}{under_load}"),
        );
    }
    let max = link.gen_max.zip(link.width_max);
    let capable = max
        .map(|(g, w)| format!(" (capable of Gen{g} x{w})"))
        .unwrap_or_default();
    match max {
        Some((g, w)) if !meets(g, w) => finding(
            Status::Fail,
            who,
            &found,
            expected,
            format!(
                "{who} PCIe link runs at {found}{under_load} and is capable of at most Gen{g} x{w} in this slot, expected at least {want}"
            ),
        ),
        _ if !t.certain => finding(
            Status::Warn,
            who,
            format!("{found} at rest"),
            expected,
            format!(
                "{who} PCIe link read at {found}{capable} at rest and could not be read under load: an idle GPU lowers its link, so a downtrained link is not ruled out (the host bandwidth check measures it)"
            ),
        ),
        _ => finding(
            Status::Fail,
            who,
            &found,
            expected,
            format!(
                "{who} PCIe link trained at {found}{under_load}{capable}, expected at least {want}: the link is downtrained"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(cur: (u32, u32), max: (u32, u32), loaded: Option<(u32, u32)>) -> PcieLink {
        PcieLink {
            gen_current: Some(cur.0),
            width_current: Some(cur.1),
            gen_max: Some(max.0),
            width_max: Some(max.1),
            gen_loaded: loaded.map(|l| l.0),
            width_loaded: loaded.map(|l| l.1),
            replay_counter: Some(0),
        }
    }

    fn judge(l: &PcieLink) -> Finding {
        pcie_finding("GPU 0", l, Some(5), Some(16))
    }

    #[test]
    fn an_idle_link_that_trains_fully_under_load_passes() {
        let f = judge(&link((1, 16), (5, 16), Some((5, 16))));
        assert_eq!(f.status, Status::Pass, "{}", f.reason);
        assert_eq!(f.reason, "GPU 0 PCIe link Gen5 x16 under load");
    }

    #[test]
    fn a_link_short_under_load_is_downtrained() {
        let f = judge(&link((1, 16), (5, 16), Some((4, 16))));
        assert_eq!(f.status, Status::Fail);
        assert!(f
            .reason
            .contains("trained at Gen4 x16 under load (capable of Gen5 x16)"));
        assert!(f.reason.contains("downtrained"), "{}", f.reason);
    }

    #[test]
    fn an_idle_reading_below_max_without_load_only_warns() {
        let f = judge(&link((1, 16), (5, 16), None));
        assert_eq!(f.status, Status::Warn, "{}", f.reason);
        assert!(f.reason.contains("at rest"), "{}", f.reason);
        assert!(f.reason.contains("not ruled out"), "{}", f.reason);
    }

    #[test]
    fn a_reading_at_max_needs_no_load() {
        // The captured H200 VM: Gen5 x16 current and max, nothing loaded.
        let f = judge(&link((5, 16), (5, 16), None));
        assert_eq!(f.status, Status::Pass);
        // Narrow at its maximum: the link cannot do better, so it fails without a load.
        let f = judge(&link((5, 8), (5, 8), None));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.reason.contains("capable of at most Gen5 x8"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn a_slot_short_of_the_suite_fails_even_at_rest() {
        let f = judge(&link((1, 16), (4, 16), None));
        assert_eq!(f.status, Status::Fail, "{}", f.reason);
        assert!(f
            .reason
            .contains("capable of at most Gen4 x16 in this slot"));
    }

    #[test]
    fn no_reading_is_a_skip() {
        let f = judge(&PcieLink::default());
        assert_eq!(f.status, Status::Skip);
        assert!(f.reason.contains("not available here"));
    }
}
