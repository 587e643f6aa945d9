//! Topology: GPU count, model and memory; NVLinks between each pair; NVSwitch; PCIe link of each
//! GPU; NUMA affinity. Judged from the inventory, which is the measurement.

use super::judge::{finding, gpu_list, not_available};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Status, Subject};
use crate::inventory::{ComputeMode, Gpu, Inventory, PcieLink, Reading};
use crate::suite::{MigExpect, PairPath, PciePath};

pub struct Topology;

impl Check for Topology {
    fn runs_on_gpus(&self) -> bool {
        false
    }
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
                Subject::node(),
                format!("{n} GPUs"),
                format!("{want} GPUs"),
                reason,
            ));
        }
        // What the GPUs' modes say is judged whatever the suite states: it is not a topology
        // the suite gave to compare with (below).
        let modes = gpu_mode_findings(inv, exp.mig);
        let of_modes = modes.len();
        out.extend(modes);
        for g in &inv.gpus {
            let who = format!("GPU {}", g.index);
            let sub = Subject::gpu(g.index);
            if let (Some(model), false) = (&exp.gpu_model, g.gives(Reading::Model)) {
                out.push(not_available(&sub, Reading::Model, format!("a {model}")));
            } else if let Some(model) = &exp.gpu_model {
                let ok = g.name.to_lowercase().contains(&model.to_lowercase());
                out.push(finding(
                    if ok { Status::Pass } else { Status::Fail },
                    sub.clone(),
                    &g.name,
                    format!("a {model}"),
                    if ok {
                        format!("{who} is an {}", g.name)
                    } else {
                        format!("{who} is an {}, expected a {model}", g.name)
                    },
                ));
            }
            // A floor of 0 GiB holds every GPU: no judgement (the suite's load cautions).
            let memory_min = exp.memory_gib_min.filter(|m| *m > 0.0);
            if let (Some(min), false) = (memory_min, g.gives(Reading::Memory)) {
                out.push(not_available(
                    &sub,
                    Reading::Memory,
                    format!(">= {min} GiB"),
                ));
            } else if let Some(min) = memory_min {
                let gib = g.memory_bytes as f64 / (1u64 << 30) as f64;
                let ok = gib >= min;
                out.push(finding(
                    if ok { Status::Pass } else { Status::Fail },
                    sub.clone(),
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
                out.push(pcie_finding(&sub, &g.pcie, topo.pcie_gen, topo.pcie_width));
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
                            sub.clone(),
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
                            sub.clone(),
                            "not available here",
                            format!("NUMA {want}"),
                            format!("{who} NUMA node: not available here"),
                        )),
                    }
                }
            }
        }
        if let Some(cpus) = &topo.cpu_affinity {
            for g in &inv.gpus {
                if let Some(want) = cpus.get(g.index) {
                    out.push(affinity_finding(g, want));
                }
            }
        }
        for p in &inv.pairs {
            let Some(want) = topo.expected_links(p.a, p.b) else {
                continue;
            };
            let sub = Subject::between(p.a, p.b);
            let who = sub.describe();
            let expected = if want == 0 {
                "no NVLink".to_string()
            } else {
                format!("NV{want}")
            };
            // A GPU whose link state could not be read has links the count does not know of.
            if let Some(unread) = inv.links_unread_in(p.a, p.b) {
                out.push(finding(
                    Status::Skip,
                    sub.clone(),
                    "not available here",
                    expected,
                    format!(
                        "{who}: not available here: the NVLink state of {unread} (the links \
                         between them are not known)"
                    ),
                ));
                continue;
            }
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
                sub.clone(),
                found,
                expected,
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
                        Subject::node(),
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
                    Subject::node(),
                    "not available here",
                    if want { "NVSwitch" } else { "no NVSwitch" },
                    "NVSwitch presence: not available here",
                )),
            }
        }
        if let Some(groups) = &topo.socket_groups {
            out.extend(group_findings(inv, groups, Place::Socket));
        }
        if let Some(groups) = &topo.numa_groups {
            out.extend(group_findings(inv, groups, Place::Numa));
        }
        if let Some(groups) = &topo.cpu_affinity_groups {
            out.extend(group_findings(inv, groups, Place::Cpus));
        }
        if let Some(want) = topo.nvswitch_count {
            out.push(match inv.nvswitches {
                Some(s) => finding(
                    if s == want {
                        Status::Pass
                    } else {
                        Status::Fail
                    },
                    Subject::node(),
                    format!("{s} NVSwitches"),
                    format!("{want} NVSwitches"),
                    if s == want {
                        format!("{s} NVSwitches reached by active NVLinks")
                    } else {
                        format!("{s} NVSwitches reached by active NVLinks, expected {want}")
                    },
                ),
                None => finding(
                    Status::Skip,
                    Subject::node(),
                    "not available here",
                    format!("{want} NVSwitches"),
                    "NVSwitch count: not available here",
                ),
            });
        }
        for pp in &topo.pcie_paths {
            out.push(path_finding(inv, pp));
        }
        if out.len() == of_modes {
            out.push(finding(
                Status::Skip,
                Subject::node(),
                "-",
                "-",
                "the suite states no topology to compare with",
            ));
        }
        out
    }
}

/// A GPU's CPU affinity against the CPU list the suite states, compared as sets. A list that
/// was not read, or does not read as a CPU list, is "not available here", never a pass.
fn affinity_finding(g: &Gpu, want: &str) -> Finding {
    use crate::platform::numa::canonical_cpulist;
    let sub = Subject::gpu(g.index);
    let who = sub.describe();
    let expected = format!("CPUs {want}");
    let want_set = canonical_cpulist(want);
    match g.cpu_affinity.as_deref() {
        None => finding(
            Status::Skip,
            sub.clone(),
            "not available here",
            expected,
            format!("{who} CPU affinity: not available here"),
        ),
        Some(found) => match canonical_cpulist(found) {
            None => finding(
                Status::Skip,
                sub.clone(),
                found,
                expected,
                format!("{who} CPU affinity reads '{found}', not a CPU list"),
            ),
            Some(f) if Some(&f) == want_set.as_ref() => finding(
                Status::Pass,
                sub.clone(),
                format!("CPUs {found}"),
                expected,
                format!("{who} is local to CPUs {found}"),
            ),
            Some(_) => finding(
                Status::Fail,
                sub.clone(),
                format!("CPUs {found}"),
                expected,
                format!("{who} is local to CPUs {found}, expected CPUs {want}"),
            ),
        },
    }
}

/// Where a GPU sits, for the group relations.
#[derive(Clone, Copy)]
enum Place {
    Socket,
    Numa,
    Cpus,
}

impl Place {
    /// The place as text; two GPUs are in one place when their texts are equal (a CPU list in
    /// its canonical form, so that lists are compared as sets).
    fn of(self, g: &Gpu) -> Option<String> {
        match self {
            Place::Socket => g.cpu_socket.map(|v| v.to_string()),
            Place::Numa => g.numa_node.map(|v| v.to_string()),
            Place::Cpus => g
                .cpu_affinity
                .as_deref()
                .and_then(crate::platform::numa::canonical_cpulist),
        }
    }
    fn what(self) -> &'static str {
        match self {
            Place::Socket => "CPU socket",
            Place::Numa => "NUMA node",
            Place::Cpus => "CPU list",
        }
    }
}

/// The GPUs of each group share one socket (or NUMA node), and different groups sit on
/// different ones. Which number the socket has is not judged. A GPU whose place was not read
/// is "not available here", never assumed to be where it should.
fn group_findings(inv: &Inventory, groups: &[Vec<usize>], place: Place) -> Vec<Finding> {
    let what = place.what();
    let mut out = Vec::new();
    // Each group's single place, when its GPUs agree.
    let mut agreed: Vec<Option<String>> = Vec::new();
    for group in groups {
        let mut read = Vec::new();
        for &i in group {
            match inv.gpus.get(i).and_then(|g| place.of(g)) {
                Some(v) => read.push((v, i)),
                None => out.push(finding(
                    Status::Skip,
                    Subject::gpu(i),
                    "not available here",
                    format!("its {what} shared with {}", gpu_list(group)),
                    if inv.gpus.get(i).is_some() {
                        format!("GPU {i} {what}: not available here")
                    } else {
                        format!("GPU {i} {what}: GPU {i} is not present")
                    },
                )),
            }
        }
        let at = crate::inventory::group_in_order(read);
        match at.len() {
            0 => agreed.push(None),
            1 => agreed.push(Some(at[0].0.clone())),
            _ => {
                agreed.push(None);
                let spread = at
                    .iter()
                    .map(|(v, ids)| format!("{} on {what} {v}", gpu_list(ids)))
                    .collect::<Vec<_>>()
                    .join(", ");
                out.push(finding(
                    Status::Fail,
                    Subject::group(group),
                    spread.clone(),
                    format!("one {what}"),
                    format!("{} should share one {what}: {spread}", gpu_list(group)),
                ));
            }
        }
    }
    for (gi, group) in groups.iter().enumerate() {
        let Some(v) = &agreed[gi] else { continue };
        let clash: Vec<&Vec<usize>> = groups
            .iter()
            .enumerate()
            .filter(|(gj, _)| *gj != gi && agreed[*gj].as_ref() == Some(v))
            .map(|(_, g)| g)
            .collect();
        let sub = Subject::group(group);
        let who = gpu_list(group);
        out.push(if clash.is_empty() {
            finding(
                Status::Pass,
                sub.clone(),
                format!("{what} {v}"),
                format!("one {what} of their own"),
                format!("{who} share {what} {v}, and no other group of GPUs is on it"),
            )
        } else {
            let others = clash
                .iter()
                .map(|g| gpu_list(g))
                .collect::<Vec<_>>()
                .join("; ");
            finding(
                Status::Fail,
                sub.clone(),
                format!("{what} {v}"),
                format!("one {what} of their own"),
                format!("{who} should not share a {what} with {others}: all are on {what} {v}"),
            )
        });
    }
    out
}

/// A pair's PCIe path against the farthest class the suite allows.
fn path_finding(inv: &Inventory, pp: &PairPath) -> Finding {
    let sub = Subject::between(pp.a, pp.b);
    let who = sub.describe();
    let want = pp.path.label();
    let expected = format!("PCIe path {want} or nearer");
    let found = inv.pair(pp.a, pp.b).and_then(|p| p.pcie_path.as_deref());
    match found.map(|f| (f, PciePath::parse(f))) {
        Some((f, Some(path))) if path <= pp.path => finding(
            Status::Pass,
            sub.clone(),
            f,
            expected,
            format!("{who}: PCIe path {f}"),
        ),
        Some((f, Some(_))) => finding(
            Status::Fail,
            sub.clone(),
            f,
            expected,
            format!("{who}: PCIe path {f}, farther than the {want} expected"),
        ),
        Some((f, None)) => finding(
            Status::Skip,
            sub.clone(),
            f,
            expected,
            format!("{who}: PCIe path reads '{f}', not a class nodecert knows"),
        ),
        None => finding(
            Status::Skip,
            sub.clone(),
            "not available here",
            expected,
            format!("{who} PCIe path: not available here"),
        ),
    }
}

/// Whether each GPU can be measured whole: MIG mode (judged off unless the suite says
/// `mig = "any"`; a suite that states "off" is promised the reading of every GPU) and a compute
/// mode that takes no process at all. Both make a node that no figure describes: CUDA on a GPU
/// in MIG mode sees its instances, and a Prohibited GPU takes no context.
fn gpu_mode_findings(inv: &Inventory, mig: Option<MigExpect>) -> Vec<Finding> {
    let mut out = Vec::new();
    let ids = |f: &dyn Fn(&Gpu) -> bool| -> Vec<usize> {
        inv.gpus.iter().filter(|g| f(g)).map(|g| g.index).collect()
    };
    let on = ids(&|g| g.mig_enabled == Some(true));
    if mig == Some(MigExpect::Any) {
        if !on.is_empty() {
            out.push(
                finding(
                    Status::Pass,
                    Subject::node(),
                    format!("MIG on: {}", gpu_list(&on)),
                    "MIG on or off",
                    format!(
                        "MIG mode is on on {} (node.mig = \"any\"): CUDA sees their instances, \
                         and their figures are an instance's",
                        gpu_list(&on)
                    ),
                )
                .informational()
                .on("mig"),
            );
        }
        // A change pending (`nvidia-smi -mig` with no reset since): the node changes at its
        // next GPU reset or reboot, which the note says.
        for g in &inv.gpus {
            if let Some(to) = g.mig_pending {
                out.push(
                    finding(
                        Status::Pass,
                        Subject::gpu(g.index),
                        format!("MIG {} at next reset", on_off_word(to)),
                        "MIG on or off",
                        format!(
                            "GPU {}: MIG mode turns {} at its next reset (pending), and the \
                             figures after it will be {}",
                            g.index,
                            on_off_word(to),
                            if to {
                                "an instance's"
                            } else {
                                "the whole GPU's"
                            }
                        ),
                    )
                    .informational()
                    .on("mig"),
                );
            }
        }
    } else {
        for g in inv.gpus.iter().filter(|g| g.mig_enabled == Some(true)) {
            let (i, bus) = (g.index, &g.pci_bus_id);
            let how = if g.mig_pending == Some(false) {
                "turning it off is pending: a GPU reset applies it".to_string()
            } else {
                format!("`nvidia-smi -i {bus} -mig 0`, then a GPU reset, turns it off")
            };
            out.push(
                finding(
                    Status::Fail,
                    Subject::gpu(i),
                    "MIG on",
                    "MIG off",
                    format!(
                        "GPU {i} has MIG mode on: CUDA sees its instances, not the whole GPU, so \
                         no figure would be of the GPU ({how}; node.mig = \"any\" accepts it)"
                    ),
                )
                .on("mig"),
            );
        }
        // Off now, on at the next reset: the figures are the whole GPU's today, and after a
        // reboot the node is not the one certified.
        for g in inv
            .gpus
            .iter()
            .filter(|g| g.mig_enabled == Some(false) && g.mig_pending == Some(true))
        {
            let (i, bus) = (g.index, &g.pci_bus_id);
            out.push(
                finding(
                    Status::Warn,
                    Subject::gpu(i),
                    "MIG on at next reset",
                    "MIG off",
                    format!(
                        "GPU {i} has MIG mode off, but set to turn on at its next reset \
                         (pending): measured whole now, after a GPU reset or a reboot CUDA sees \
                         its instances and this certificate does not describe it \
                         (`nvidia-smi -i {bus} -mig 0` cancels it)"
                    ),
                )
                .on("mig"),
            );
        }
        if mig == Some(MigExpect::Off) && on.is_empty() {
            let unread = ids(&|g| g.mig_enabled.is_none());
            if unread.is_empty() {
                out.push(
                    finding(
                        Status::Pass,
                        Subject::node(),
                        "MIG off",
                        "MIG off",
                        format!("MIG mode is off on every GPU ({})", inv.gpus.len()),
                    )
                    .on("mig"),
                );
            } else {
                out.push(
                    finding(
                        Status::Skip,
                        Subject::node(),
                        "not read",
                        "MIG off",
                        format!(
                            "not available here: the MIG mode of {} (node.mig = \"off\")",
                            gpu_list(&unread)
                        ),
                    )
                    .on("mig"),
                );
            }
        }
    }
    for g in inv
        .gpus
        .iter()
        .filter(|g| g.compute_mode == Some(ComputeMode::Prohibited))
    {
        let (i, bus) = (g.index, &g.pci_bus_id);
        out.push(
            finding(
                Status::Fail,
                Subject::gpu(i),
                "compute mode Prohibited",
                "a compute mode that admits a process",
                format!(
                    "GPU {i} is in compute mode Prohibited: it takes no CUDA process, so \
                     nothing can be measured or run on it (`nvidia-smi -i {bus} -c DEFAULT`)"
                ),
            )
            .on("compute_mode"),
        );
    }
    out
}

/// "on" or "off".
fn on_off_word(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// One GPU's PCIe link against the suite. A reading at rest below the link's maximum may only be
/// the GPU saving power, so it fails only when it was read under load (or the maximum itself is
/// short of the suite); otherwise it warns.
fn pcie_finding(
    sub: &Subject,
    link: &PcieLink,
    want_gen: Option<u32>,
    want_width: Option<u32>,
) -> Finding {
    let who = sub.describe();
    let show = |x: Option<u32>| x.map(|x| x.to_string()).unwrap_or_else(|| "?".into());
    let want = format!("Gen{} x{}", show(want_gen), show(want_width));
    let Some(t) = link.trained() else {
        return finding(
            Status::Skip,
            sub.clone(),
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
            sub.clone(),
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
            sub.clone(),
            &found,
            expected,
            format!(
                "{who} PCIe link runs at {found}{under_load} and is capable of at most Gen{g} x{w} in this slot, expected at least {want}"
            ),
        ),
        _ if !t.certain => finding(
            Status::Warn,
            sub.clone(),
            format!("{found} at rest"),
            expected,
            format!(
                "{who} PCIe link read at {found}{capable} at rest and could not be read under load: an idle GPU lowers its link, so a downtrained link is not ruled out (the host bandwidth check measures it)"
            ),
        ),
        _ => finding(
            Status::Fail,
            sub.clone(),
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
    use crate::evidence::Evidence;
    use crate::suite::TopologyExpect;

    /// The topology findings of a simulated `node` after `edit` changed what was read, against
    /// a suite that states only `topo`.
    fn relations(node: &str, topo: &str, edit: impl FnOnce(&mut Inventory)) -> Vec<Finding> {
        let ev: Evidence = crate::testutil::simulated(node, &[]);
        let mut inv = ev.node.clone();
        edit(&mut inv);
        let mut suite = crate::suite::load::load(node).unwrap().suite;
        suite.node = Default::default();
        suite.topology = toml::from_str::<TopologyExpect>(topo).unwrap();
        let ctx = Ctx {
            suite: &suite,
            inventory: &inv,
            earlier: &[],
            simulated: true,
        };
        Topology.evaluate(&ctx, &Measured::default())
    }

    fn statuses(f: &[Finding]) -> Vec<(String, Status)> {
        f.iter().map(|x| (x.subject.describe(), x.status)).collect()
    }

    const HGX: &str = "socket_groups = [[0, 1, 2, 3], [4, 5, 6, 7]]";

    /// The simulated H100 against its own suite, with literal NUMA ids, after `edit`: the
    /// findings that are not a pass, as (subject, status, reason).
    fn h100(
        edit_suite: impl FnOnce(&mut crate::suite::Suite),
        edit: impl FnOnce(&mut Inventory),
    ) -> Vec<(String, Status, String)> {
        let ev: Evidence = crate::testutil::simulated("h100-sxm-8", &[]);
        let mut inv = ev.node.clone();
        edit(&mut inv);
        let mut suite = crate::suite::load::load("h100-sxm-8").unwrap().suite;
        suite.topology.numa_nodes = Some(vec![0, 0, 0, 0, 1, 1, 1, 1]);
        edit_suite(&mut suite);
        let ctx = crate::testutil::ctx(&suite, &inv);
        Topology
            .evaluate(&ctx, &Measured::default())
            .into_iter()
            .filter(|f| f.status != Status::Pass)
            .map(|f| (f.subject.describe(), f.status, f.reason))
            .collect()
    }

    #[test]
    fn what_the_node_is_is_judged_against_the_suite() {
        assert_eq!(h100(|_| {}, |_| {}), vec![]);
        // A GPU missing, or one too many.
        let f = h100(
            |_| {},
            |inv| {
                inv.gpus.truncate(7);
                inv.pairs.retain(|p| p.b < 7);
            },
        );
        assert_eq!((f[0].0.as_str(), f[0].1), ("node", Status::Fail));
        assert!(
            f[0].2
                .starts_with("1 of 8 GPUs missing: only 7 found (bus ids "),
            "{}",
            f[0].2
        );
        let f = h100(
            |_| {},
            |inv| {
                let mut extra = inv.gpus[7].clone();
                extra.index = 8;
                inv.gpus.push(extra);
            },
        );
        assert_eq!(f[0].2, "9 GPUs found, 8 expected");
        // The model, and the memory floor (79 GiB): at it passes, under it fails.
        let f = h100(
            |_| {},
            |inv| inv.gpus[2].name = "NVIDIA A100-SXM4-80GB".into(),
        );
        assert_eq!(
            (f[0].0.as_str(), f[0].2.as_str()),
            (
                "GPU 2",
                "GPU 2 is an NVIDIA A100-SXM4-80GB, expected a H100"
            )
        );
        let f = h100(|_| {}, |inv| inv.gpus[3].memory_bytes = 79 << 30);
        assert_eq!(f, vec![]);
        let f = h100(
            |_| {},
            |inv| inv.gpus[3].memory_bytes = (79 << 30) - (1 << 29),
        );
        assert_eq!(
            (f[0].0.as_str(), f[0].2.as_str()),
            (
                "GPU 3",
                "GPU 3 has 78.5 GiB of memory, expected at least 79 GiB"
            )
        );
        // A model or a size NVML did not give is not available here, never a failure against
        // "unknown GPU" or 0 bytes; one GPU's unknown does not hide the others' judgements.
        let f = h100(
            |_| {},
            |inv| {
                crate::backend::sim::hide_for_tests(&mut inv.gpus[4], Reading::Model);
                crate::backend::sim::hide_for_tests(&mut inv.gpus[5], Reading::Memory);
                inv.gpus[6].memory_bytes = 1 << 30;
            },
        );
        assert_eq!(
            f,
            vec![
                (
                    "GPU 4".to_string(),
                    Status::Skip,
                    "not available here: model name of GPU 4".to_string()
                ),
                (
                    "GPU 5".to_string(),
                    Status::Skip,
                    "not available here: memory size of GPU 5".to_string()
                ),
                (
                    "GPU 6".to_string(),
                    Status::Fail,
                    "GPU 6 has 1.0 GiB of memory, expected at least 79 GiB".to_string()
                ),
            ]
        );
        // A floor of 0 GiB judges nothing, so it asks for no reading either.
        let f = h100(
            |s| s.node.memory_gib_min = Some(0.0),
            |inv| crate::backend::sim::hide_for_tests(&mut inv.gpus[5], Reading::Memory),
        );
        assert_eq!(f, vec![]);
        // A literal NUMA id that differs.
        let f = h100(|_| {}, |inv| inv.gpus[6].numa_node = Some(0));
        assert_eq!(f[0].2, "GPU 6 is on NUMA node 0, expected 1");
        // The PCIe link is judged when the suite states its generation or its width alone.
        let f = h100(
            |s| s.topology.pcie_width = None,
            |inv| {
                inv.gpus[1].pcie.gen_current = Some(3);
                inv.gpus[1].pcie.gen_loaded = Some(3);
                inv.gpus[1].pcie.gen_max = Some(5);
            },
        );
        assert_eq!((f[0].0.as_str(), f[0].1), ("GPU 1", Status::Fail), "{f:#?}");
    }

    /// The MIG and compute-mode findings of the simulated H100 with `mig` in its suite and the
    /// inventory edited: (subject, status, informational, reason).
    fn modes(
        mig: Option<crate::suite::MigExpect>,
        edit: impl FnOnce(&mut Inventory),
    ) -> Vec<(String, Status, bool, String)> {
        let mut inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        edit(&mut inv);
        let mut suite = crate::suite::load::load("h100-sxm-8").unwrap().suite;
        suite.node.mig = mig;
        let ctx = crate::testutil::ctx(&suite, &inv);
        Topology
            .evaluate(&ctx, &Measured::default())
            .into_iter()
            .filter(|f| matches!(f.metric.as_deref(), Some("mig" | "compute_mode")))
            .map(|f| (f.subject.describe(), f.status, f.info, f.reason))
            .collect()
    }

    #[test]
    fn a_gpu_in_mig_mode_fails_unless_the_suite_accepts_it() {
        use crate::suite::MigExpect::{Any, Off};
        // Whole GPUs and nothing stated: nothing to say.
        assert_eq!(modes(None, |_| {}), vec![]);
        let on3 = |inv: &mut Inventory| inv.gpus[3].mig_enabled = Some(true);
        for mig in [None, Some(Off)] {
            let f = modes(mig, on3);
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!((f[0].0.as_str(), f[0].1), ("GPU 3", Status::Fail));
            assert!(
                f[0].3
                    .starts_with("GPU 3 has MIG mode on: CUDA sees its instances")
                    && f[0]
                        .3
                        .contains("`nvidia-smi -i 0000:48:00.0 -mig 0`, then a GPU reset"),
                "{}",
                f[0].3
            );
        }
        // Accepted: shown, not judged.
        let f = modes(Some(Any), on3);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].1, f[0].2), (Status::Pass, true));
        assert!(f[0].3.contains("MIG mode is on on GPU 3"), "{}", f[0].3);
        assert_eq!(modes(Some(Any), |_| {}), vec![]);
        // Stated "off": promised, so it passes where read and is not available where not.
        let f = modes(Some(Off), |_| {});
        assert_eq!(
            f,
            vec![(
                "node".into(),
                Status::Pass,
                false,
                "MIG mode is off on every GPU (8)".into()
            )]
        );
        let f = modes(Some(Off), |inv| inv.gpus[5].mig_enabled = None);
        assert_eq!((f[0].1, f[0].2), (Status::Skip, false), "{f:#?}");
        assert!(f[0].3.contains("not available here") && f[0].3.contains("GPU 5"));
        // Unread and nothing stated: not judged (a GPU without MIG answers "not supported").
        assert_eq!(modes(None, |inv| inv.gpus[5].mig_enabled = None), vec![]);
    }

    /// A MIG mode pending for the next reset: off now and on then warns (the node measured
    /// whole is not the one after a reboot), whatever the suite states but "any", where it is a
    /// note; on now with off pending fails as any GPU in MIG mode, saying a reset turns it off.
    #[test]
    fn a_mig_mode_pending_for_the_next_reset_is_named() {
        use crate::suite::MigExpect::{Any, Off};
        let pending_on = |inv: &mut Inventory| inv.gpus[6].mig_pending = Some(true);
        for mig in [None, Some(Off)] {
            let f = modes(mig, pending_on);
            let warned: Vec<_> = f.iter().filter(|x| x.1 != Status::Pass).collect();
            assert_eq!(warned.len(), 1, "{f:#?}");
            assert_eq!(
                (warned[0].0.as_str(), warned[0].1, warned[0].2),
                ("GPU 6", Status::Warn, false)
            );
            assert_eq!(
                warned[0].3,
                "GPU 6 has MIG mode off, but set to turn on at its next reset (pending): \
                 measured whole now, after a GPU reset or a reboot CUDA sees its instances and \
                 this certificate does not describe it (`nvidia-smi -i 0000:78:00.0 -mig 0` \
                 cancels it)"
            );
        }
        // Stated "off": the GPUs are off now, which passes beside the warning.
        assert!(modes(Some(Off), pending_on)
            .iter()
            .any(|x| x.1 == Status::Pass && x.3 == "MIG mode is off on every GPU (8)"));
        let f = modes(Some(Any), pending_on);
        assert_eq!(
            f,
            vec![(
                "GPU 6".into(),
                Status::Pass,
                true,
                "GPU 6: MIG mode turns on at its next reset (pending), and the figures after it \
                 will be an instance's"
                    .into()
            )]
        );
        let off_pending = |inv: &mut Inventory| {
            inv.gpus[1].mig_enabled = Some(true);
            inv.gpus[1].mig_pending = Some(false);
        };
        let f = modes(None, off_pending);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].1, Status::Fail);
        assert!(
            f[0].3
                .contains("(turning it off is pending: a GPU reset applies it; node.mig"),
            "{}",
            f[0].3
        );
        let f = modes(Some(Any), off_pending);
        assert!(
            f.iter().any(|x| x.3
                == "GPU 1: MIG mode turns off at its next reset (pending), and the figures \
                    after it will be the whole GPU's"),
            "{f:#?}"
        );
        // Unread MIG mode with a pending reading (no such inventory is written) says nothing
        // of a reset.
        let f = modes(None, |inv| {
            inv.gpus[2].mig_enabled = None;
            inv.gpus[2].mig_pending = Some(true);
        });
        assert_eq!(f, vec![]);
    }

    /// A suite that states no topology has nothing to compare with whatever the GPUs' modes
    /// say: a MIG change pending (a warning, or information where the suite accepts any mode)
    /// does not hide that, and the check stays partial, as it is on a clean node.
    #[test]
    fn what_the_modes_say_does_not_hide_a_suite_that_states_no_topology() {
        use crate::suite::MigExpect::Any;
        let check = |mig, edit: &dyn Fn(&mut Inventory)| {
            let mut inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
            edit(&mut inv);
            let mut suite = crate::suite::load::load("base").unwrap().suite;
            suite.node.mig = mig;
            let ctx = crate::testutil::ctx(&suite, &inv);
            let f = Topology.evaluate(&ctx, &Measured::default());
            assert!(
                f.iter().any(|x| x.status == Status::Skip
                    && !x.info
                    && x.reason == "the suite states no topology to compare with"),
                "{f:#?}"
            );
            crate::runner::summarize_with_coverage(&f)
        };
        let pending = |inv: &mut Inventory| inv.gpus[1].mig_pending = Some(true);
        let clean = check(None, &|_| {});
        assert_eq!(clean.0, Status::Skip);
        for mig in [None, Some(Any)] {
            let (_, _, coverage) = check(mig, &pending);
            let c = coverage.expect("coverage");
            assert!(c.partial(), "{mig:?}: {c:?}");
        }
    }

    #[test]
    fn a_gpu_that_takes_no_process_fails_naming_its_compute_mode() {
        use crate::inventory::ComputeMode as M;
        let f = modes(None, |inv| {
            inv.gpus[2].compute_mode = Some(M::Prohibited);
            inv.gpus[4].compute_mode = Some(M::ExclusiveProcess);
            inv.gpus[6].compute_mode = None;
        });
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].0.as_str(), f[0].1), ("GPU 2", Status::Fail));
        assert!(
            f[0].3
                .starts_with("GPU 2 is in compute mode Prohibited: it takes no CUDA process")
                && f[0]
                    .3
                    .ends_with("(`nvidia-smi -i 0000:38:00.0 -c DEFAULT`)"),
            "{}",
            f[0].3
        );
    }

    #[test]
    fn nvlinks_per_pair_and_the_nvswitch_are_judged_exactly() {
        // One link fewer, naming the inactive link on the pair (not one to another GPU).
        let f = h100(
            |_| {},
            |inv| {
                let p = inv.pairs.iter_mut().find(|p| (p.a, p.b) == (2, 5)).unwrap();
                p.nvlinks = 17;
                let g = &mut inv.gpus[2];
                g.nvlinks[4].active = false;
                g.nvlinks[4].remote.gpu = Some(5);
                g.nvlinks[9].active = false;
                g.nvlinks[9].remote.gpu = Some(7);
            },
        );
        let pair: Vec<&(String, Status, String)> =
            f.iter().filter(|x| x.0 == "GPU 2 - GPU 5").collect();
        assert_eq!(pair.len(), 1, "{f:#?}");
        assert_eq!(
            pair[0].2,
            "GPU 2 - GPU 5: 17 NVLinks active, expected 18 (NV18) (inactive: GPU 2 link 4)"
        );
        // More links than stated is no match either.
        let f = h100(
            |_| {},
            |inv| {
                inv.pairs
                    .iter_mut()
                    .find(|p| (p.a, p.b) == (0, 1))
                    .unwrap()
                    .nvlinks = 19
            },
        );
        assert_eq!((f[0].0.as_str(), f[0].1), ("GPU 0 - GPU 1", Status::Fail));
        // A suite that expects no NVLink says so.
        let f = h100(
            |s| s.topology.nvlinks_per_pair = Some(0),
            |inv| {
                for p in inv.pairs.iter_mut().filter(|p| p.a > 0) {
                    p.nvlinks = 0;
                }
            },
        );
        assert!(
            f.iter()
                .all(|x| x.2.ends_with("NVLinks active, expected none")),
            "{f:#?}"
        );
        assert_eq!(f.len(), 7, "{f:#?}");
        // What was expected, in the findings' own words.
        let expected = |topo: &str| -> Vec<String> {
            let mut e: Vec<String> = relations("h100-sxm-8", topo, |_| {})
                .into_iter()
                .map(|x| x.expected)
                .collect();
            e.dedup();
            e
        };
        assert_eq!(expected("nvlinks_per_pair = 0"), ["no NVLink"]);
        assert_eq!(expected("nvlinks_per_pair = 18"), ["NV18"]);
        // The NVSwitch: required and absent fails; none required and none present passes.
        let f = h100(|_| {}, |inv| inv.nvswitches = Some(0));
        assert!(
            f.iter()
                .any(|x| x.1 == Status::Fail && x.2.contains("NVSwitch")),
            "{f:#?}"
        );
        let f = h100(
            |s| {
                s.topology.nvswitch = Some(false);
                s.topology.nvswitch_count = None;
            },
            |inv| inv.nvswitches = Some(0),
        );
        assert_eq!(f, vec![], "{f:#?}");
        let f = h100(
            |s| {
                s.topology.nvswitch = Some(false);
                s.topology.nvswitch_count = None;
            },
            |_| {},
        );
        assert!(
            f.iter()
                .any(|x| x.1 == Status::Fail && x.2.contains("NVSwitch")),
            "{f:#?}"
        );
    }

    const H100_CPUS: &str = "cpu_affinity = [\"0-55,112-167\", \"0-55,112-167\", \
        \"0-55,112-167\", \"0-55,112-167\", \"56-111,168-223\", \"56-111,168-223\", \
        \"56-111,168-223\", \"56-111,168-223\"]";

    #[test]
    fn each_gpu_is_local_to_the_cpus_the_suite_states() {
        // The simulated H100 reads its sockets' lists: every GPU passes, compared as sets.
        let f = relations("h100-sxm-8", H100_CPUS, |_| {});
        assert_eq!(f.len(), 8, "{f:#?}");
        assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
        assert_eq!(f[5].reason, "GPU 5 is local to CPUs 56-111,168-223");
        let f = relations("h100-sxm-8", H100_CPUS, |inv| {
            inv.gpus[5].cpu_affinity = Some("168-223,56-111".into());
        });
        assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
        // A GPU local to the other socket's CPUs fails, named, with both lists.
        let f = relations("h100-sxm-8", H100_CPUS, |inv| {
            inv.gpus[5].cpu_affinity = Some("0-55,112-167".into());
        });
        let bad: Vec<&Finding> = f.iter().filter(|x| x.status != Status::Pass).collect();
        assert_eq!(bad.len(), 1, "{f:#?}");
        assert_eq!(
            (bad[0].subject.describe().as_str(), bad[0].status),
            ("GPU 5", Status::Fail)
        );
        assert_eq!(
            bad[0].reason,
            "GPU 5 is local to CPUs 0-55,112-167, expected CPUs 56-111,168-223"
        );
        // A list the platform did not give (a VM's -1) is not available here, never a pass.
        let f = relations("h100-sxm-8", H100_CPUS, |inv| {
            inv.gpus[2].cpu_affinity = None;
        });
        let bad: Vec<&Finding> = f.iter().filter(|x| x.status != Status::Pass).collect();
        assert_eq!(bad.len(), 1, "{f:#?}");
        assert_eq!(
            (bad[0].status, bad[0].reason.as_str()),
            (Status::Skip, "GPU 2 CPU affinity: not available here")
        );
        let f = relations("h100-sxm-8", H100_CPUS, |inv| {
            inv.gpus[2].cpu_affinity = Some("garbage".into());
        });
        assert!(
            f.iter()
                .any(|x| x.status == Status::Skip && x.reason.contains("not a CPU list")),
            "{f:#?}"
        );
    }

    #[test]
    fn gpus_that_share_their_cpus_are_judged_as_a_relation() {
        // Whatever numbers the CPUs have (SMT off renumbers them), the halves share lists.
        let halves = "cpu_affinity_groups = [[0, 1, 2, 3], [4, 5, 6, 7]]";
        let renumbered = |inv: &mut Inventory| {
            for g in &mut inv.gpus {
                g.cpu_affinity = Some(if g.index < 4 { "0-47" } else { "48-95" }.into());
            }
        };
        let f = relations("h100-sxm-8", halves, renumbered);
        assert_eq!(
            statuses(&f),
            vec![
                ("GPUs 0, 1, 2, 3".to_string(), Status::Pass),
                ("GPUs 4, 5, 6, 7".to_string(), Status::Pass)
            ],
            "{f:#?}"
        );
        // A GPU whose CPUs are not its group's fails the group, naming who has which list.
        let f = relations("h100-sxm-8", halves, |inv| {
            renumbered(inv);
            inv.gpus[3].cpu_affinity = Some("48-95".into());
        });
        let bad: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Fail).collect();
        assert!(
            bad.iter().any(|x| x.reason
                == "GPUs 0, 1, 2, 3 should share one CPU list: GPUs 0, 1, 2 on CPU list 0-47, GPU 3 on CPU list 48-95"),
            "{f:#?}"
        );
        // Two groups local to the same CPUs fail both.
        let f = relations("h100-sxm-8", halves, |inv| {
            for g in &mut inv.gpus {
                g.cpu_affinity = Some("0-95".into());
            }
        });
        assert_eq!(
            f.iter().filter(|x| x.status == Status::Fail).count(),
            2,
            "{f:#?}"
        );
        // Unread is not available here.
        let f = relations("h100-sxm-8", halves, |inv| {
            renumbered(inv);
            inv.gpus[6].cpu_affinity = None;
        });
        assert!(
            f.iter()
                .any(|x| x.status == Status::Skip
                    && x.reason == "GPU 6 CPU list: not available here"),
            "{f:#?}"
        );
    }

    #[test]
    fn socket_groups_hold_whatever_the_numa_ids() {
        // An HGX in NPS4 mode: 3,3,1,1,7,7,5,5, nodes 1 and 3 on socket 0, 5 and 7 on socket 1.
        let nps4 = |inv: &mut Inventory| {
            for (g, (numa, socket)) in inv.gpus.iter_mut().zip([
                (3, 0),
                (3, 0),
                (1, 0),
                (1, 0),
                (7, 1),
                (7, 1),
                (5, 1),
                (5, 1),
            ]) {
                g.numa_node = Some(numa);
                g.cpu_socket = Some(socket);
            }
        };
        let f = relations("h100-sxm-8", HGX, nps4);
        assert_eq!(
            statuses(&f),
            vec![
                ("GPUs 0, 1, 2, 3".to_string(), Status::Pass),
                ("GPUs 4, 5, 6, 7".to_string(), Status::Pass)
            ],
            "{f:#?}"
        );
        // Literal ids fail the same healthy node: the false alarm the relations avoid.
        let f = relations("h100-sxm-8", "numa_nodes = [0, 0, 0, 0, 1, 1, 1, 1]", nps4);
        assert!(f.iter().all(|x| x.status == Status::Fail), "{f:#?}");
        // And the NUMA relation of the same node is pairs, not halves.
        let f = relations(
            "h100-sxm-8",
            "numa_groups = [[0, 1], [2, 3], [4, 5], [6, 7]]",
            nps4,
        );
        assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
        let f = relations(
            "h100-sxm-8",
            "numa_groups = [[0, 1, 2, 3], [4, 5, 6, 7]]",
            nps4,
        );
        assert_eq!(
            f.iter().filter(|x| x.status == Status::Fail).count(),
            2,
            "{f:#?}"
        );
        assert!(
            f[0].reason
                .contains("GPUs 0, 1 on NUMA node 3, GPUs 2, 3 on NUMA node 1"),
            "{}",
            f[0].reason
        );
    }

    #[test]
    fn a_gpu_on_the_wrong_socket_fails_its_group() {
        let f = relations("h100-sxm-8", HGX, |inv| inv.gpus[6].cpu_socket = Some(0));
        let fails: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Fail).collect();
        assert_eq!(fails.len(), 1, "{f:#?}");
        assert_eq!(fails[0].subject.describe(), "GPUs 4, 5, 6, 7");
        assert!(
            fails[0]
                .reason
                .contains("GPUs 4, 5, 7 on CPU socket 1, GPU 6 on CPU socket 0"),
            "{}",
            fails[0].reason
        );
    }

    #[test]
    fn two_groups_on_one_socket_fail_both() {
        let f = relations("h100-sxm-8", HGX, |inv| {
            inv.gpus.iter_mut().for_each(|g| g.cpu_socket = Some(0))
        });
        assert_eq!(
            statuses(&f),
            vec![
                ("GPUs 0, 1, 2, 3".to_string(), Status::Fail),
                ("GPUs 4, 5, 6, 7".to_string(), Status::Fail)
            ]
        );
        assert!(f[0]
            .reason
            .contains("should not share a CPU socket with GPUs 4, 5, 6, 7"));
    }

    #[test]
    fn an_unread_socket_is_not_assumed() {
        let f = relations("h100-sxm-8", HGX, |inv| inv.gpus[2].cpu_socket = None);
        assert!(f.contains(&finding(
            Status::Skip,
            Subject::gpu(2),
            "not available here",
            "its CPU socket shared with GPUs 0, 1, 2, 3",
            "GPU 2 CPU socket: not available here",
        )));
        let f = relations("h100-sxm-8", HGX, |inv| {
            inv.gpus.iter_mut().for_each(|g| g.cpu_socket = None)
        });
        assert!(f.iter().all(|x| x.status == Status::Skip), "{f:#?}");
        assert_eq!(f.len(), 8);
    }

    #[test]
    fn the_nvswitch_count_is_judged() {
        let st = |n: Option<u32>| {
            relations("h100-sxm-8", "nvswitch_count = 4", |inv| inv.nvswitches = n)[0].status
        };
        assert_eq!(st(Some(4)), Status::Pass);
        assert_eq!(st(Some(3)), Status::Fail);
        assert_eq!(st(Some(5)), Status::Fail);
        assert_eq!(st(None), Status::Skip);
    }

    #[test]
    fn a_pcie_path_may_be_no_farther_than_stated() {
        let topo = r#"pcie_paths = [{ a = 0, b = 1, path = "PXB" }]"#;
        let with = |path: Option<&str>| {
            let path = path.map(String::from);
            relations("l40s-pcie-4", topo, move |inv| {
                let p = inv.pairs.iter_mut().find(|p| (p.a, p.b) == (0, 1)).unwrap();
                p.pcie_path = path;
            })[0]
                .clone()
        };
        assert_eq!(with(Some("PXB")).status, Status::Pass);
        assert_eq!(with(Some("PIX")).status, Status::Pass);
        let far = with(Some("SYS"));
        assert_eq!(far.status, Status::Fail);
        assert_eq!(
            far.reason,
            "GPU 0 - GPU 1: PCIe path SYS, farther than the PXB expected"
        );
        assert_eq!(with(Some("NODE")).status, Status::Fail);
        assert_eq!(with(Some("??")).status, Status::Skip);
        assert_eq!(with(None).status, Status::Skip);
    }

    #[test]
    fn the_nvswitch_count_is_explained() {
        let reason = |n: u32| {
            relations("h100-sxm-8", "nvswitch_count = 4", |inv| {
                inv.nvswitches = Some(n)
            })[0]
                .reason
                .clone()
        };
        assert_eq!(reason(4), "4 NVSwitches reached by active NVLinks");
        assert_eq!(
            reason(3),
            "3 NVSwitches reached by active NVLinks, expected 4"
        );
    }

    #[test]
    fn the_stated_pair_is_the_one_judged_in_either_order() {
        // Every pair near (PIX) but 2-3, across the sockets (SYS).
        let far_2_3 = |inv: &mut Inventory| {
            for p in &mut inv.pairs {
                let far = (p.a, p.b) == (2, 3);
                p.pcie_path = Some(if far { "SYS" } else { "PIX" }.into());
            }
        };
        for (a, b) in [(2, 3), (3, 2)] {
            let topo = format!(r#"pcie_paths = [{{ a = {a}, b = {b}, path = "PXB" }}]"#);
            let f = relations("l40s-pcie-4", &topo, far_2_3);
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!(f[0].status, Status::Fail, "{a}-{b}: {f:#?}");
            assert_eq!(f[0].subject, Subject::between(a, b));
            assert_eq!(f[0].found, "SYS");
        }
    }

    #[test]
    fn path_classes_are_ordered_nearest_first() {
        for w in PciePath::ALL.windows(2) {
            assert!(w[0] < w[1]);
            assert_eq!(PciePath::parse(w[0].label()), Some(w[0]));
        }
        assert_eq!(PciePath::parse("NV18"), None);
    }

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
        pcie_finding(&Subject::gpu(0), l, Some(5), Some(16))
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
