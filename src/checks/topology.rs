//! Topology: GPU count, model and memory; NVLinks between each pair; NVSwitch; PCIe link of each
//! GPU; NUMA affinity. Judged from the inventory, which is the measurement.

use super::judge::finding;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Status};

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
                let (gen, width) = (g.pcie.gen_current, g.pcie.width_current);
                let want = format!(
                    "Gen{} x{}",
                    topo.pcie_gen
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| "?".into()),
                    topo.pcie_width
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| "?".into())
                );
                match (gen, width) {
                    (Some(gen), Some(width)) => {
                        let gen_ok = topo.pcie_gen.is_none_or(|w| gen >= w);
                        let width_ok = topo.pcie_width.is_none_or(|w| width >= w);
                        let found = format!("Gen{gen} x{width}");
                        let max = match (g.pcie.gen_max, g.pcie.width_max) {
                            (Some(a), Some(b)) => format!(" (capable of Gen{a} x{b})"),
                            _ => String::new(),
                        };
                        out.push(finding(
                            if gen_ok && width_ok { Status::Pass } else { Status::Fail },
                            &who,
                            &found,
                            format!("at least {want}"),
                            if gen_ok && width_ok {
                                format!("{who} PCIe link {found}")
                            } else {
                                format!("{who} PCIe link trained at {found}{max}, expected at least {want}: the link is downtrained")
                            },
                        ));
                    }
                    _ => out.push(finding(
                        Status::Skip,
                        &who,
                        "not available here",
                        want,
                        format!("{who} PCIe link generation/width: not available here"),
                    )),
                }
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
