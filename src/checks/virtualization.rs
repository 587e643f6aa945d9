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
    fn runs_on_gpus(&self) -> bool {
        false
    }
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
            // Any mode passes: a note of what the node runs as, not a judgement (it could not
            // have failed).
            Some(true) if want == VirtExpect::Any => finding(
                Status::Pass,
                Subject::node(),
                &found,
                expect_label(want),
                match v.mode {
                    VirtMode::Unknown => format!("{}; the suite accepts any mode", why_unknown(v)),
                    _ => format!("the node runs as {found}; the suite accepts any mode"),
                },
            )
            .informational(),
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
            // The suite promised a mode and the node cannot tell which it runs as: the
            // judgement was not made (the run is partial), never a pass with a warning.
            None => finding(
                Status::Skip,
                Subject::node(),
                &found,
                expect_label(want),
                format!("not available here: {}", why_unknown(v)),
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
        let linked: Vec<&crate::inventory::GpuPair> = inv
            .pairs
            .iter()
            .filter(|p| ctx.suite.topology.expected_links(p.a, p.b).unwrap_or(0) > 0)
            .collect();
        let expects_nvlink = !linked.is_empty();
        let any_active = inv.gpus.iter().any(|g| g.nvlinks.iter().any(|l| l.active));
        // No link seen, and every pair the suite expects linked has a GPU whose link state could
        // not be read: not known, not down. One pair of two GPUs read whole shows it down.
        let unread = inv.links_unread();
        let proven = linked.iter().any(|p| inv.links_known(p.a, p.b));
        if n > 1 && expects_nvlink && !any_active && !proven {
            out.push(finding(
                Status::Skip,
                Subject::node(),
                "not available here",
                "NVLink between GPUs",
                format!(
                    "whether NVLink survived: not available here: no link was seen active, and \
                     the NVLink state of {} could not be read",
                    unread.join(", ")
                ),
            ));
        } else if n > 1 && expects_nvlink && !any_active {
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
            // Not read is not known to be off: as non-root, the kernel gives only the first 64
            // bytes of a bridge's config space, and ACS is in the extended space beyond.
            for b in &v.acs_unknown_bridges {
                out.push(finding(
                    Status::Skip,
                    Subject::bridge(b),
                    "not available here",
                    "ACS disabled on bare metal",
                    format!(
                        "not available here: PCIe ACS of bridge {b} above the GPUs (its \
                         extended config space needs root)"
                    ),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The virtualization judgements of the simulated H100 (bare metal, NVLink, peer access)
    /// after `edit`, against a suite that expects `want`, as (subject, status).
    fn judged(
        want: Option<VirtExpect>,
        edit: impl FnOnce(&mut crate::inventory::Inventory),
    ) -> Vec<(String, Status, String)> {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let mut suite = ev.suite.resolved.clone();
        suite.node.virtualization = want;
        let mut inv = ev.node.clone();
        edit(&mut inv);
        let ctx = crate::testutil::ctx(&suite, &inv);
        Virtualization(VirtualizationCheck {
            enabled: true,
            require_p2p: None,
        })
        .evaluate(&ctx, &Measured::default())
        .into_iter()
        .map(|f| (f.subject.describe(), f.status, f.reason))
        .collect()
    }

    fn mode_status(want: Option<VirtExpect>, mode: VirtMode) -> Status {
        judged(want, |inv| {
            inv.virtualization.mode = mode;
            inv.virtualization.hypervisor = Some("KVM".into());
        })[0]
            .1
    }

    #[test]
    fn the_mode_is_judged_against_the_promise() {
        use VirtExpect as E;
        use VirtMode as M;
        for (want, mode, st) in [
            (Some(E::BareMetal), M::BareMetal, Status::Pass),
            (Some(E::BareMetal), M::Passthrough, Status::Fail),
            (Some(E::Passthrough), M::Passthrough, Status::Pass),
            (Some(E::Passthrough), M::Vgpu, Status::Fail),
            (Some(E::Passthrough), M::BareMetal, Status::Fail),
            (Some(E::Vgpu), M::Vgpu, Status::Pass),
            (Some(E::Vgpu), M::Passthrough, Status::Fail),
            (Some(E::Vm), M::Passthrough, Status::Pass),
            (Some(E::Vm), M::Vgpu, Status::Pass),
            (Some(E::Vm), M::BareMetal, Status::Fail),
            (Some(E::BareMetal), M::Unknown, Status::Skip),
            (Some(E::Vm), M::Unknown, Status::Skip),
            (Some(E::Any), M::Unknown, Status::Pass),
            (None, M::Vgpu, Status::Pass),
        ] {
            assert_eq!(mode_status(want, mode), st, "{want:?} {mode:?}");
        }
        // The hypervisor is named only for a VM.
        let f = judged(Some(E::BareMetal), |inv| {
            inv.virtualization.hypervisor = Some("KVM".into());
        });
        assert_eq!(f[0].2, "the node runs as bare metal");
        let f = judged(Some(E::Passthrough), |inv| {
            inv.virtualization.mode = M::Vgpu;
        });
        assert!(
            f[0].2.starts_with("vGPU where passthrough was promised"),
            "{}",
            f[0].2
        );
        let f = judged(Some(E::Vgpu), |inv| {
            inv.virtualization.mode = M::Passthrough;
            inv.virtualization.hypervisor = Some("KVM".into());
        });
        assert_eq!(
            f[0].2,
            "the node runs as passthrough VM (KVM), expected vGPU"
        );
        // "vGPU where passthrough was promised" is said of exactly that.
        let f = judged(Some(E::Passthrough), |inv| {
            inv.virtualization.mode = M::BareMetal
        });
        assert_eq!(
            f[0].2,
            "the node runs as bare metal, expected passthrough VM"
        );
        let f = judged(Some(E::BareMetal), |inv| inv.virtualization.mode = M::Vgpu);
        assert_eq!(f[0].2, "the node runs as vGPU, expected bare metal");
    }

    #[test]
    fn any_mode_is_a_note_not_a_judgement() {
        // "any" (or nothing said) cannot fail: what the node runs as is noted, and counts as no
        // judgement; a promised mode is one.
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        for (want, judgement) in [
            (None, false),
            (Some(VirtExpect::Any), false),
            (Some(VirtExpect::BareMetal), true),
        ] {
            let mut suite = ev.suite.resolved.clone();
            suite.node.virtualization = want;
            let ctx = crate::testutil::ctx(&suite, &ev.node);
            let f = Virtualization(VirtualizationCheck {
                enabled: true,
                require_p2p: None,
            })
            .evaluate(&ctx, &Measured::default());
            assert_eq!(f[0].is_judgement(), judgement, "{want:?}: {:?}", f[0]);
            assert_eq!(f[0].status, Status::Pass);
        }
    }

    /// A PCIe box whose suite expects no NVLink is not "downgraded to PCIe": it is PCIe.
    #[test]
    fn a_node_whose_suite_expects_no_nvlink_is_not_said_to_have_lost_it() {
        let ev = crate::testutil::simulated("l40s-pcie-4", &[]);
        assert!(ev
            .node
            .gpus
            .iter()
            .all(|g| g.nvlinks.iter().all(|l| !l.active)));
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        let f = Virtualization(VirtualizationCheck {
            enabled: true,
            require_p2p: None,
        })
        .evaluate(&ctx, &Measured::default());
        assert!(f.iter().all(|x| x.status != Status::Fail), "{f:#?}");
        assert!(!f.iter().any(|x| x.reason.contains("downgraded")), "{f:#?}");
    }

    #[test]
    fn peer_access_nvlink_and_acs_are_judged_per_pair_and_bridge() {
        // Healthy: one pass per pair, nothing else.
        let f = judged(Some(VirtExpect::BareMetal), |_| {});
        assert_eq!(f.len(), 1 + 28, "{f:#?}");
        assert!(f.iter().all(|x| x.1 == Status::Pass));
        // A pair without peer access fails by name, and says why in a VM; unread is not a pass.
        let f = judged(None, |inv| {
            let p = inv.pairs.iter_mut().find(|p| (p.a, p.b) == (2, 5)).unwrap();
            p.p2p.read = Some(false);
            p.p2p.write = Some(false);
            let q = inv.pairs.iter_mut().find(|p| (p.a, p.b) == (0, 1)).unwrap();
            q.p2p = Default::default();
            inv.virtualization.mode = VirtMode::Passthrough;
        });
        let bad: Vec<&(String, Status, String)> =
            f.iter().filter(|x| x.1 != Status::Pass).collect();
        assert_eq!(bad.len(), 2, "{f:#?}");
        assert_eq!(
            (bad[0].0.as_str(), bad[0].1),
            ("GPU 0 - GPU 1", Status::Skip)
        );
        assert_eq!(
            (bad[1].0.as_str(), bad[1].1, bad[1].2.as_str()),
            (
                "GPU 2 - GPU 5",
                Status::Fail,
                "peer access not available between GPU 2 and GPU 5: the hypervisor hides it"
            )
        );
        // One GPU has no pairs to judge.
        let f = judged(None, |inv| {
            inv.gpus.truncate(1);
            inv.pairs.clear();
        });
        assert_eq!(f.len(), 1, "{f:#?}");
        // The suite expects NVLink and no link is active: downgraded to PCIe, a failure.
        let f = judged(None, |inv| {
            for g in &mut inv.gpus {
                for l in &mut g.nvlinks {
                    l.active = false;
                }
            }
        });
        let down: Vec<&(String, Status, String)> =
            f.iter().filter(|x| x.1 == Status::Fail).collect();
        assert_eq!(down.len(), 1, "{f:#?}");
        assert_eq!(
            down[0].2,
            "topology downgraded to PCIe: the suite expects NVLink but no link is active"
        );
        // No link seen where GPU 0's link state was not read: a pair of two GPUs read whole
        // still shows NVLink down; where every GPU's state was not read, it is not known.
        let unread = |gpus: usize| {
            judged(None, move |inv| {
                for g in &mut inv.gpus {
                    g.nvlinks.clear();
                }
                for g in inv.gpus.iter_mut().take(gpus) {
                    g.unavailable.push(crate::inventory::Reading::NvlinkState);
                }
            })
        };
        let f = unread(1);
        let down: Vec<&(String, Status, String)> =
            f.iter().filter(|x| x.1 == Status::Fail).collect();
        assert_eq!(down.len(), 1, "{f:#?}");
        assert!(
            down[0].2.starts_with("topology downgraded to PCIe"),
            "{f:#?}"
        );
        let f = unread(8);
        assert!(f.iter().all(|x| x.1 != Status::Fail), "{f:#?}");
        let na: Vec<&(String, Status, String)> = f.iter().filter(|x| x.1 == Status::Skip).collect();
        assert_eq!(na.len(), 1, "{f:#?}");
        assert!(na[0].2.starts_with(
            "whether NVLink survived: not available here: no link was seen active, and the \
             NVLink state of GPU 0, GPU 1, GPU 2"
        ));
        // One active link is enough to rule that out.
        let f = judged(None, |inv| {
            for g in inv.gpus.iter_mut().skip(1) {
                for l in &mut g.nvlinks {
                    l.active = false;
                }
            }
        });
        assert!(f.iter().all(|x| x.1 == Status::Pass), "{f:#?}");
        // ACS on a bridge above the GPUs is a warning on bare metal, and not judged in a VM.
        let acs = |mode: VirtMode| {
            judged(None, move |inv| {
                inv.virtualization.mode = mode;
                inv.virtualization.acs_enabled_bridges = vec!["0000:16:00.0".into()];
            })
            .into_iter()
            .filter(|x| x.1 == Status::Warn)
            .map(|x| x.0)
            .collect::<Vec<_>>()
        };
        assert_eq!(acs(VirtMode::BareMetal), ["bridge 0000:16:00.0"]);
        assert!(acs(VirtMode::Passthrough).is_empty());
        // ACS that could not be read (as non-root) is not known to be off: not available here
        // on bare metal, never a pass; in a VM it is not asked.
        let unknown = |mode: VirtMode| {
            judged(None, move |inv| {
                inv.virtualization.mode = mode;
                inv.virtualization.acs_unknown_bridges = vec!["0000:16:00.0".into()];
            })
        };
        let f = unknown(VirtMode::BareMetal);
        let na: Vec<_> = f.iter().filter(|x| x.1 == Status::Skip).collect();
        assert_eq!(na.len(), 1, "{f:#?}");
        assert_eq!(na[0].0, "bridge 0000:16:00.0");
        assert_eq!(
            na[0].2,
            "not available here: PCIe ACS of bridge 0000:16:00.0 above the GPUs (its extended \
             config space needs root)"
        );
        assert!(f.iter().all(|x| x.1 != Status::Warn && x.1 != Status::Fail));
        let f = unknown(VirtMode::Passthrough);
        assert!(f.iter().all(|x| x.1 == Status::Pass), "{f:#?}");
    }
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
        assert_eq!(f.status, Status::Skip);
        assert!(!f.info, "a promised mode not judged counts against the run");
        assert_eq!(
            f.reason,
            "not available here: a hypervisor, KVM (microVM without DMI, e.g. Firecracker), is present according to \
             cpuid 0x40000000 (KVM) and cpuinfo hypervisor flag, but NVML did not say whether \
             the GPUs are passed through or vGPU"
        );
        assert!(f.found.starts_with("unknown (KVM"), "{}", f.found);
        // Only the cpuinfo flag: a hypervisor, not named.
        let f = mode_finding("h200-vm-1", Some(true), Cpuid::NotAvailable, None);
        assert_eq!(
            f.reason,
            "not available here: a hypervisor is present according to cpuinfo hypervisor flag, \
             but NVML did not say whether the GPUs are passed through or vGPU"
        );
        // Nothing could be read at all: then "from any witness" is true.
        let f = mode_finding("h200-vm-1", None, Cpuid::NotAvailable, None);
        assert_eq!(f.status, Status::Skip);
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
