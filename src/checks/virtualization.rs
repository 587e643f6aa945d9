//! Virtualization: bare metal, passthrough VM or vGPU, as the suite promises; and whether peer
//! access and NVLink survived it (in VMs the guest often sees PCIe where the host has NVLink).

use super::judge::finding;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Fact, FactValue, Finding, Status, Subject};
use crate::inventory::VirtMode;
use crate::platform;
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

/// "a", "a and b", "a, b and c".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Why the mode is unknown, naming the witnesses that did answer and what they said.
fn why_unknown(v: &crate::inventory::Virtualization) -> String {
    let hv = platform::hypervisor_witnesses(&v.witnesses);
    let name = v
        .hypervisor
        .as_deref()
        .filter(|h| *h != "unidentified hypervisor");
    if !hv.is_empty() {
        let sources: Vec<String> = hv
            .iter()
            .map(|w| match &w.names {
                Some(n) if Some(n.as_str()) != name => format!("{} ({n})", w.source),
                _ => w.source.clone(),
            })
            .collect();
        return format!(
            "a hypervisor{} is present according to {}, but NVML did not say whether the GPUs are passed through or vGPU",
            name.map_or(String::new(), |n| format!(", {n},")),
            and_list(&sources)
        );
    }
    let answered: Vec<String> = platform::answering_witnesses(&v.witnesses)
        .iter()
        .map(|w| format!("{}: {}", w.source, w.finding))
        .collect();
    if answered.is_empty() {
        "the virtualization mode could not be determined: NVML did not report it and no other witness (cpuid, cpuinfo, DMI, /sys/hypervisor, device tree) could be read".into()
    } else {
        format!(
            "the virtualization mode could not be determined: NVML did not report it and the witnesses that answered ({}) do not settle it",
            answered.join("; ")
        )
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
            .map(|w| {
                Fact::new(
                    w.source.clone(),
                    Subject::node(),
                    FactValue::Text(w.finding.clone()),
                )
            })
            .collect();
        facts.push(Fact::new(
            "mode",
            Subject::node(),
            FactValue::Text(v.mode.to_string()),
        ));
        Ok(Measured {
            metrics: vec![],
            facts,
        })
    }

    fn samples(&self, _gpus: usize) -> (u64, String) {
        // Reads the inventory (or earlier records): no samples of its own.
        (0, String::new())
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
            Some(true) if v.mode == VirtMode::Unknown => finding(
                Status::Pass,
                Subject::node(),
                &found,
                expect_label(want),
                format!("{}; the suite accepts any mode", why_unknown(v)),
            ),
            Some(true) => finding(Status::Pass, Subject::node(), &found, expect_label(want), format!("the node runs as {found}")),
            Some(false) => finding(
                Status::Fail,
                Subject::node(),
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
                Subject::node(),
                &found,
                expect_label(want),
                why_unknown(v),
            ),
        });
        let n = inv.gpus.len();
        let require_p2p = self.0.require_p2p.unwrap_or(n > 1);
        if require_p2p {
            for p in &inv.pairs {
                let who = Subject::between(p.a, p.b);
                let name = who.describe();
                match p.p2p.usable() {
                    Some(true) => out.push(finding(
                        Status::Pass,
                        who,
                        "peer access",
                        "peer access",
                        format!("{name}: peer access available"),
                    )),
                    Some(false) => out.push(finding(
                        Status::Fail,
                        who,
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
                        who,
                        "not available here",
                        "peer access",
                        format!("{name}: peer access status not available here"),
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
                Subject::node(),
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
                    Subject::bridge(b),
                    "ACS enabled",
                    "ACS disabled on bare metal",
                    format!("PCIe ACS is enabled on bridge {b} above the GPUs: peer traffic is routed through the root complex (slow or hanging P2P)"),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Inventory;
    use crate::platform::{hypervisor::Cpuid, NvmlVirt};

    /// The node-mode finding for a guest whose /proc/cpuinfo has (or lacks) the hypervisor flag,
    /// with `cpuid` and NVML's answer, judged by `suite`.
    fn mode_finding(
        suite: &str,
        flag: Option<bool>,
        cpuid: Cpuid,
        nvml: Option<NvmlVirt>,
    ) -> Finding {
        let dir = tempfile::tempdir().expect("temp dir");
        if let Some(flag) = flag {
            std::fs::create_dir_all(dir.path().join("proc")).expect("mkdir");
            let flags = if flag { "fpu hypervisor" } else { "fpu" };
            std::fs::write(
                dir.path().join("proc/cpuinfo"),
                format!("flags\t: {flags}\n"),
            )
            .expect("write");
        }
        let (virtualization, _) = platform::virtualization(dir.path(), &cpuid, nvml, &[]);
        let inv = Inventory {
            virtualization,
            ..Default::default()
        };
        let loaded = crate::suite::load::load(suite).expect("embedded suite");
        let ctx = Ctx {
            suite: &loaded.suite,
            inventory: &inv,
            earlier: &[],
            simulated: false,
        };
        let check = Virtualization(
            loaded
                .suite
                .checks
                .virtualization
                .clone()
                .expect("virtualization check"),
        );
        check.evaluate(&ctx, &Measured::default()).remove(0)
    }

    #[test]
    fn an_unknown_mode_names_the_witnesses_that_answered() {
        let kvm = || Cpuid::Vendor("KVMKVMKVM".into());
        // A hypervisor is named, NVML is silent: passthrough or vGPU cannot be told apart.
        let f = mode_finding("h200-vm-1", Some(true), kvm(), None);
        assert_eq!(f.status, Status::Warn);
        assert_eq!(
            f.reason,
            "a hypervisor, KVM (microVM without DMI, e.g. Firecracker), is present according to \
             cpuid 0x40000000 (KVM) and cpuinfo hypervisor flag, but NVML did not say whether \
             the GPUs are passed through or vGPU"
        );
        assert!(f.found.starts_with("unknown (KVM"), "{}", f.found);
        // Only the cpuinfo flag: a hypervisor, not named.
        let f = mode_finding("h200-vm-1", Some(true), Cpuid::NotAvailable, None);
        assert_eq!(
            f.reason,
            "a hypervisor is present according to cpuinfo hypervisor flag, but NVML did not say \
             whether the GPUs are passed through or vGPU"
        );
        // Nothing could be read at all: then "from any witness" is true.
        let f = mode_finding("h200-vm-1", None, Cpuid::NotAvailable, None);
        assert_eq!(f.status, Status::Warn);
        assert!(
            f.reason
                .contains("NVML did not report it and no other witness"),
            "{}",
            f.reason
        );
        // A suite that accepts any mode passes, and says the same.
        let f = mode_finding("base", Some(true), kvm(), None);
        assert_eq!(f.status, Status::Pass);
        assert!(
            f.reason.ends_with("vGPU; the suite accepts any mode"),
            "{}",
            f.reason
        );
        // NVML answers: the mode is known and the wording is the usual one.
        let f = mode_finding("h200-vm-1", Some(true), kvm(), Some(NvmlVirt::PassThrough));
        assert_eq!(f.status, Status::Pass);
        assert!(
            f.reason.starts_with("the node runs as passthrough VM (KVM"),
            "{}",
            f.reason
        );
    }
}
