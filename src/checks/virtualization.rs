//! Virtualization: bare metal, passthrough VM or vGPU, as the suite promises; and whether peer
//! access and NVLink survived it (in VMs the guest often sees PCIe where the host has NVLink).

use super::judge::finding;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Fact, Finding, Status, Subject};
use crate::inventory::VirtMode;
use crate::suite::{VirtExpect, VirtualizationCheck};

pub struct Virtualization(pub VirtualizationCheck);

fn expect_label(e: VirtExpect) -> &'static str {
    match e {
        VirtExpect::BareMetal => "bare metal",
        VirtExpect::Passthrough => "passthrough VM",
        VirtExpect::Vgpu => "vGPU",
        VirtExpect::Vm => "a VM (passthrough or vGPU)",
        VirtExpect::Any => "any",
    }
}

impl Check for Virtualization {
    fn id(&self) -> String {
        "virtualization".into()
    }
    fn kind(&self) -> &'static str {
        "virtualization"
    }
    fn title(&self) -> String {
        "Virtualization and peer access".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        Ok(vec![format!(
            "virtualization mode from {} witnesses; peer access of {} pairs",
            ctx.inventory.virtualization.witnesses.len(),
            ctx.inventory.pairs.len()
        )])
    }

    fn measure(
        &self,
        ctx: &Ctx,
        _: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        progress(1, 1);
        let v = &ctx.inventory.virtualization;
        let mut facts: Vec<Fact> = v
            .witnesses
            .iter()
            .map(|w| Fact {
                name: w.source.clone(),
                subject: Subject::node(),
                value: w.finding.clone(),
            })
            .collect();
        facts.push(Fact {
            name: "mode".into(),
            subject: Subject::node(),
            value: v.mode.to_string(),
        });
        Ok(Measured {
            metrics: vec![],
            facts,
        })
    }

    fn evaluate(&self, ctx: &Ctx, _: &Measured) -> Vec<Finding> {
        let inv = ctx.inventory;
        let v = &inv.virtualization;
        let mut out = Vec::new();
        let found = match &v.hypervisor {
            Some(h) if v.mode != VirtMode::BareMetal => format!("{} ({h})", v.mode),
            _ => v.mode.to_string(),
        };
        let want = ctx.suite.node.virtualization.unwrap_or(VirtExpect::Any);
        let ok = match (want, v.mode) {
            (VirtExpect::Any, _) => Some(true),
            (_, VirtMode::Unknown) => None,
            (VirtExpect::BareMetal, m) => Some(m == VirtMode::BareMetal),
            (VirtExpect::Passthrough, m) => Some(m == VirtMode::Passthrough),
            (VirtExpect::Vgpu, m) => Some(m == VirtMode::Vgpu),
            (VirtExpect::Vm, m) => Some(m == VirtMode::Passthrough || m == VirtMode::Vgpu),
        };
        out.push(match ok {
            Some(true) => finding(Status::Pass, "node", &found, expect_label(want), format!("the node runs as {found}")),
            Some(false) => finding(
                Status::Fail,
                "node",
                &found,
                expect_label(want),
                if want == VirtExpect::Passthrough && v.mode == VirtMode::Vgpu {
                    "vGPU where passthrough was promised: the GPUs are shared slices, not whole devices".to_string()
                } else {
                    format!("the node runs as {found}, expected {}", expect_label(want))
                },
            ),
            None => finding(
                Status::Warn,
                "node",
                "unknown",
                expect_label(want),
                "the virtualization mode could not be determined from any witness",
            ),
        });
        let n = inv.gpus.len();
        let require_p2p = self.0.require_p2p.unwrap_or(n > 1);
        if require_p2p {
            for p in &inv.pairs {
                let who = format!("GPU {} - GPU {}", p.a, p.b);
                match p.p2p.usable() {
                    Some(true) => out.push(finding(
                        Status::Pass,
                        &who,
                        "peer access",
                        "peer access",
                        format!("{who}: peer access available"),
                    )),
                    Some(false) => out.push(finding(
                        Status::Fail,
                        &who,
                        "no peer access",
                        "peer access",
                        format!(
                            "peer access not available between GPU {} and GPU {}{}",
                            p.a,
                            p.b,
                            if v.mode != VirtMode::BareMetal {
                                ": the hypervisor hides it"
                            } else {
                                ""
                            }
                        ),
                    )),
                    None => out.push(finding(
                        Status::Skip,
                        &who,
                        "not available here",
                        "peer access",
                        format!("{who}: peer access status not available here"),
                    )),
                }
            }
        }
        let expects_nvlink = inv
            .pairs
            .iter()
            .any(|p| ctx.suite.topology.expected_links(p.a, p.b).unwrap_or(0) > 0);
        let any_active = inv.gpus.iter().any(|g| g.nvlinks.iter().any(|l| l.active));
        if n > 1 && expects_nvlink && !any_active {
            out.push(finding(
                Status::Fail,
                "node",
                "no active NVLink",
                "NVLink between GPUs",
                format!(
                    "topology downgraded to PCIe: the suite expects NVLink but no link is active{}",
                    if v.mode != VirtMode::BareMetal {
                        " (typical of a VM that does not pass NVLink through)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if v.mode == VirtMode::BareMetal {
            for b in &v.acs_enabled_bridges {
                out.push(finding(
                    Status::Warn,
                    format!("bridge {b}"),
                    "ACS enabled",
                    "ACS disabled on bare metal",
                    format!("PCIe ACS is enabled on bridge {b} above the GPUs: peer traffic is routed through the root complex (slow or hanging P2P)"),
                ));
            }
        }
        out
    }
}
