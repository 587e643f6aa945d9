//! The scale-out fabric as one node can judge it: the RDMA NICs against `[network]` (how many,
//! which link layer, their ports up at their rate), every GPU's nearest NIC (GPUDirect RDMA
//! needs it at PIX or PXB, with no ACS redirect between), GPUDirect RDMA's kernel side, and the
//! ports' error counters, read before the run (the inventory) and after its traffic (here):
//! their rise is judged. A NIC that trained at 200 instead of 400 Gb/s, a GPU whose NIC sits
//! across the socket, a missing `nvidia_peermem` or a flapping port fails by name.

use super::judge::finding;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Fact, FactValue, Finding, Status, Subject};
use crate::network::{Fabric, Nic, NicPort};
use crate::suite::{NetworkCheck, NetworkExpect, PciePath};

pub struct Network(pub NetworkCheck);

/// The RDMA devices that make up the fabric: not excluded, and of the stated link layer where
/// the suite states one. A device whose layer cannot be read is then not known to be the
/// fabric's: it is neither counted nor judged as a fabric NIC (see [`layer_unknown`]).
pub fn fabric_nics<'a>(f: &'a Fabric, expect: &NetworkExpect) -> Vec<&'a Nic> {
    f.nics
        .iter()
        .filter(|n| !expect.excludes(&n.name))
        .filter(|n| match expect.link_layer {
            Some(want) => n.link_layer() == Some(want),
            None => true,
        })
        .collect()
}

/// The devices, not excluded, whose link layer cannot be read (no port, an unreadable
/// `link_layer`, or one nodecert does not know) where the suite states the fabric's: whether
/// they are the fabric's is unknown, said as such, never taken for healthy fabric NICs.
pub fn layer_unknown<'a>(f: &'a Fabric, expect: &NetworkExpect) -> Vec<&'a Nic> {
    if expect.link_layer.is_none() {
        return vec![];
    }
    f.nics
        .iter()
        .filter(|n| !expect.excludes(&n.name) && n.link_layer().is_none())
        .collect()
}

/// Why `n`'s link layer is unknown, for a finding.
fn layer_unread(n: &Nic) -> String {
    match n.ports.first().map(|p| p.link_layer.as_deref()) {
        None => format!(
            "{}'s link layer cannot be read (no port could be read)",
            n.name
        ),
        Some(None) => format!("{}'s link layer cannot be read", n.name),
        Some(Some(text)) => format!(
            "{}'s link layer cannot be read ({text:?} is neither InfiniBand nor Ethernet)",
            n.name
        ),
    }
}

fn na(subject: Subject, expected: impl Into<String>, what: String) -> Finding {
    finding(
        Status::Skip,
        subject,
        "not available here",
        expected,
        format!("not available here: {what}"),
    )
}

fn port_subject(n: &Nic, p: &NicPort) -> Subject {
    Subject::nic(&n.name, Some(p.port))
}

impl Check for Network {
    fn runs_on_gpus(&self) -> bool {
        false
    }
    fn id(&self) -> String {
        "network".into()
    }
    fn kind(&self) -> &'static str {
        "network"
    }
    fn title(&self) -> String {
        "Network adapters (RDMA NICs, GPUDirect RDMA, error counters)".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let expect = &ctx.suite.network;
        let Some(f) = &ctx.inventory.fabric else {
            return if expect.is_empty() {
                Err("no NICs described: this simulated node's description has none, and the suite states no fabric".into())
            } else {
                Ok(vec!["the suite states a fabric, but the NICs were not read: each expectation is not available here".into()])
            };
        };
        // A NIC that hung the reading is judged (an error), never skipped as "no NIC".
        if let Some(no) = &f.no_answer {
            return Ok(vec![format!(
                "the NICs were not read for the inventory: {}",
                no.describe()
            )]);
        }
        if f.nics.is_empty() && expect.is_empty() {
            return Err("no RDMA NIC on this node, and the suite states no fabric".into());
        }
        let nics = fabric_nics(f, expect);
        Ok(vec![format!(
            "{} RDMA NIC{} of the fabric: ports, rates, GPU paths, GPUDirect RDMA; error counters read again after the run",
            nics.len(),
            if nics.len() == 1 { "" } else { "s" }
        )])
    }

    fn measure(
        &self,
        ctx: &Ctx,
        backend: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let mut m = Measured::default();
        let Some(before) = &ctx.inventory.fabric else {
            progress(1, 1);
            return Ok(m);
        };
        // A NIC that did not answer (hung firmware) makes the node untestable here: an error
        // that names the read, never a reading taken for healthy. It is not read again.
        let hung = |no: &crate::network::NoAnswer, when: &str| HwError::Timeout {
            what: format!(
                "reading the NICs {when} ({}{})",
                match (&no.nic, no.port) {
                    (Some(n), Some(p)) => format!("{n} port {p}: "),
                    (Some(n), None) => format!("{n}: "),
                    _ => String::new(),
                },
                no.file
            ),
            seconds: no.waited_s,
        };
        if let Some(no) = &before.no_answer {
            return Err(hung(no, "for the inventory"));
        }
        let after = backend.fabric(&ctx.inventory.gpus)?;
        if let Some(no) = after.as_ref().and_then(|f| f.no_answer.as_ref()) {
            return Err(hung(no, "after the run"));
        }
        for n in after.iter().flat_map(|f| &f.nics) {
            for p in &n.ports {
                for (name, v) in &p.counters {
                    m.facts.push(Fact::new(
                        name.clone(),
                        port_subject(n, p),
                        FactValue::Count(*v),
                    ));
                }
            }
        }
        progress(1, 1);
        Ok(m)
    }

    fn samples(&self, _gpus: usize) -> (u64, String) {
        (0, String::new())
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let expect = &ctx.suite.network;
        let Some(f) = &ctx.inventory.fabric else {
            return not_read(expect, "the NICs were not read");
        };
        if let Some(no) = &f.no_answer {
            // The run stops at measure (an error); judged directly, the same: an error that
            // names the read, and every expectation not available.
            let mut out = vec![finding(
                Status::Error,
                Subject {
                    nic: no.nic.clone(),
                    port: no.port,
                    ..Subject::node()
                },
                "no answer",
                format!("an answer within {} s", no.waited_s),
                no.describe(),
            )];
            out.extend(not_read(expect, "the NICs did not answer"));
            return out;
        }
        let mut out = Vec::new();
        let nics = fabric_nics(f, expect);
        let unknown = layer_unknown(f, expect);
        // Devices left out of the fabric are said, so a NIC of the wrong layer is seen; one whose
        // layer is unknown is not available here (neither counted nor judged).
        for n in f
            .nics
            .iter()
            .filter(|n| !nics.iter().any(|x| x.name == n.name))
        {
            if unknown.iter().any(|x| x.name == n.name) {
                let want = expect.link_layer.map_or("", |l| l.kernel_name());
                out.push(na(
                    Subject::nic(&n.name, None),
                    format!("link layer {want}"),
                    format!(
                        "{}: whether it is a fabric NIC is unknown, so it is neither counted nor judged",
                        layer_unread(n)
                    ),
                ));
                continue;
            }
            let why = if expect.excludes(&n.name) {
                "excluded by the suite".to_string()
            } else {
                format!(
                    "its link layer is {}, not the fabric's",
                    n.ports
                        .first()
                        .and_then(|p| p.link_layer.clone())
                        .unwrap_or_else(|| "unknown".into())
                )
            };
            let mut x = finding(
                Status::Pass,
                Subject::nic(&n.name, None),
                "not part of the fabric",
                "",
                format!("{}: not part of the fabric ({why})", n.name),
            );
            x.info = true;
            out.push(x);
        }
        out.extend(count(&nics, &unknown, expect));
        out.extend(no_rate(&nics, &unknown, expect));
        for n in &nics {
            out.extend(ports(n, expect));
        }
        out.extend(gpu_paths(ctx, &nics, &unknown, expect));
        out.extend(gdr(f, expect));
        out.extend(counters(&self.0, &nics, m));
        out
    }
}

/// Every stated expectation, when the NICs could not be read at all (`why`).
fn not_read(expect: &NetworkExpect, why: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(c) = expect.nic_count {
        out.push(na(
            Subject::node(),
            format!("at least {c} NICs"),
            format!("NIC count ({why})"),
        ));
    }
    if let Some(r) = expect.rate_gbps {
        out.push(na(
            Subject::node(),
            format!("{r} Gb/s"),
            format!("NIC rates ({why})"),
        ));
    }
    if let Some(p) = expect.gpu_nic_path {
        out.push(na(
            Subject::node(),
            format!("a NIC at {} or nearer", p.label()),
            format!("GPU-NIC paths ({why})"),
        ));
    }
    if expect.gdr == Some(true) {
        out.push(na(
            Subject::node(),
            "GPUDirect RDMA",
            format!("GPUDirect RDMA ({why})"),
        ));
    }
    out
}

/// The suite's `rate_gbps` where no fabric NIC is there to hold to it (each port's rate is judged
/// in [`ports`]) and the suite states no count (whose finding, [`count`], says the same): a
/// fabric stated at a rate and no NIC of it fails, as a GPU with no fabric NIC to reach does;
/// where devices whose link layer cannot be read may be the fabric's, the rate is not available
/// here.
fn no_rate(nics: &[&Nic], unknown: &[&Nic], expect: &NetworkExpect) -> Vec<Finding> {
    let (Some(r), true, None) = (expect.rate_gbps, nics.is_empty(), expect.nic_count) else {
        return vec![];
    };
    let expected = format!(">= {} Gb/s", super::judge::fmt_num(r));
    if !unknown.is_empty() {
        let unread: Vec<&str> = unknown.iter().map(|n| n.name.as_str()).collect();
        return vec![na(
            Subject::node(),
            expected,
            format!(
                "the fabric's rate: no fabric NIC was found, and {} whose link layer cannot be \
                 read ({}) may be the fabric's",
                unread.len(),
                unread.join(", ")
            ),
        )];
    }
    let layer = expect
        .link_layer
        .map(|l| format!(" {}", l.kernel_name()))
        .unwrap_or_default();
    vec![finding(
        Status::Fail,
        Subject::node(),
        "no NIC",
        expected,
        format!(
            "no{layer} RDMA NIC of the fabric to hold to the suite's {} Gb/s",
            super::judge::fmt_num(r)
        ),
    )]
}

/// The count of fabric NICs against `nic_count`. Devices whose layer is unknown (`unknown`) are
/// not counted; where they could make up the shortfall, the count is not available here.
fn count(nics: &[&Nic], unknown: &[&Nic], expect: &NetworkExpect) -> Vec<Finding> {
    let Some(want) = expect.nic_count else {
        return vec![];
    };
    let have = nics.len();
    let layer = expect
        .link_layer
        .map(|l| format!(" {}", l.kernel_name()))
        .unwrap_or_default();
    let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
    let unread: Vec<&str> = unknown.iter().map(|n| n.name.as_str()).collect();
    if have < want && have + unread.len() >= want {
        return vec![na(
            Subject::node(),
            format!("{want} NICs"),
            format!(
                "the NIC count: {have}{layer} RDMA NICs ({}), and {} whose link layer cannot be read ({}): whether the node has the {want} the suite asks for is unknown",
                names.join(", "),
                unread.len(),
                unread.join(", ")
            ),
        )];
    }
    let unread_note = if unread.is_empty() {
        String::new()
    } else {
        format!(
            " ({} not counted: link layer cannot be read)",
            unread.join(", ")
        )
    };
    let status = if have < want {
        Status::Fail
    } else if have > want {
        Status::Warn
    } else {
        Status::Pass
    };
    vec![finding(
        status,
        Subject::node(),
        format!("{have} NICs"),
        format!("{want} NICs"),
        match status {
            Status::Fail if have == 0 => format!("no{layer} RDMA NIC is visible; the suite asks for {want}{unread_note}"),
            Status::Fail => format!(
                "{have}{layer} RDMA NICs ({}), the suite asks for {want}{unread_note}",
                names.join(", ")
            ),
            Status::Warn => format!(
                "{have}{layer} RDMA NICs ({}), more than the {want} the suite states: exclude those that are not the fabric's",
                names.join(", ")
            ),
            _ => format!("{have}{layer} RDMA NICs ({})", names.join(", ")),
        },
    )]
}

fn ports(n: &Nic, expect: &NetworkExpect) -> Vec<Finding> {
    let stated = !expect.is_empty();
    let mut out = Vec::new();
    if n.ports.is_empty() {
        out.push(na(
            Subject::nic(&n.name, None),
            "ACTIVE/LinkUp",
            format!("{}: no port could be read", n.name),
        ));
    }
    for p in &n.ports {
        let sub = port_subject(n, p);
        let who = sub.describe();
        match p.is_up() {
            Some(true) => out.push(finding(
                Status::Pass,
                sub.clone(),
                p.state_text(),
                "ACTIVE/LinkUp",
                format!("{who} is up"),
            )),
            // A fabric NIC none of whose ports is up fails; a down port beside an up one (a
            // dual-port adapter with one port unused), or any where the suite states no
            // fabric, is a warning.
            Some(false) => out.push(finding(
                if stated && !n.ports.iter().any(|q| q.is_up() == Some(true)) {
                    Status::Fail
                } else {
                    Status::Warn
                },
                sub.clone(),
                p.state_text(),
                "ACTIVE/LinkUp",
                format!(
                    "{who} is not up: {} (a cable, a transceiver or the switch port)",
                    p.state_text()
                ),
            )),
            None => out.push(na(sub.clone(), "ACTIVE/LinkUp", format!("state of {who}"))),
        }
        if let Some(want) = expect.rate_gbps {
            match p.rate_gbps {
                Some(r) => out.push(finding(
                    if r >= want {
                        Status::Pass
                    } else {
                        Status::Fail
                    },
                    sub.clone(),
                    format!("{} Gb/s", super::judge::fmt_num(r)),
                    format!(">= {} Gb/s", super::judge::fmt_num(want)),
                    if r >= want {
                        format!("{who} at {} Gb/s", super::judge::fmt_num(r))
                    } else {
                        format!(
                            "{who} trained at {} Gb/s, below the {} Gb/s the suite asks for",
                            super::judge::fmt_num(r),
                            super::judge::fmt_num(want)
                        )
                    },
                )),
                None => out.push(na(
                    sub.clone(),
                    format!(">= {want} Gb/s"),
                    format!("rate of {who}"),
                )),
            }
        }
    }
    out
}

fn gpu_paths(ctx: &Ctx, nics: &[&Nic], unknown: &[&Nic], expect: &NetworkExpect) -> Vec<Finding> {
    let Some(want) = expect.gpu_nic_path else {
        return vec![];
    };
    // In a VM the PCI tree is the hypervisor's (each passed-through device often behind a host
    // bridge of its own), not the board's: the relation read there says nothing of the path.
    use crate::inventory::VirtMode;
    if matches!(
        ctx.inventory.virtualization.mode,
        VirtMode::Passthrough | VirtMode::Vgpu
    ) {
        return vec![na(
            Subject::node(),
            format!("a NIC at {} or nearer", want.label()),
            format!(
                "the GPU-NIC paths: in a {} VM the PCI tree is the hypervisor's, not the board's (NCCL_TOPO_FILE describes the real one)",
                ctx.inventory.virtualization.mode
            ),
        )];
    }
    let mut out = Vec::new();
    let mut served: Vec<String> = Vec::new();
    for g in &ctx.inventory.gpus {
        let sub = Subject::gpu(g.index);
        let expected = format!("a NIC at {} or nearer", want.label());
        let nearest = Fabric::nearest(nics, g.index);
        // A near device whose layer is unknown may be this GPU's fabric NIC: without a near
        // fabric NIC, the GPU's path is unknown, not failed.
        let near_unknown = Fabric::nearest(unknown, g.index).filter(|(_, p)| *p <= want);
        if let (Some((u, p)), false) = (near_unknown, nearest.is_some_and(|(_, p)| p <= want)) {
            let mut x = na(
                Subject::gpu_nic(g.index, &u.name),
                expected,
                format!(
                    "GPU {}'s path to the fabric: its nearest NIC is {} at {}, and {}",
                    g.index,
                    u.name,
                    p.label(),
                    layer_unread(u)
                ),
            );
            x.found = p.label().into();
            out.push(x);
            continue;
        }
        match nearest {
            None if nics.is_empty() => out.push(finding(
                Status::Fail,
                sub,
                "no NIC",
                expected,
                format!("GPU {} has no fabric NIC to reach", g.index),
            )),
            None => out.push(na(
                sub,
                expected,
                format!("GPU {}'s relation to the NICs", g.index),
            )),
            Some((n, path)) => {
                let near = path <= want;
                let sub = Subject::gpu_nic(g.index, &n.name);
                out.push(finding(
                    if near { Status::Pass } else { Status::Fail },
                    sub.clone(),
                    path.label(),
                    expected,
                    if near {
                        format!(
                            "GPU {}'s nearest NIC is {} at {}",
                            g.index,
                            n.name,
                            path.label()
                        )
                    } else {
                        format!(
                            "GPU {}'s nearest NIC is {} at {}{}: GPUDirect RDMA needs {} or nearer",
                            g.index,
                            n.name,
                            path.label(),
                            match path {
                                PciePath::Sys => " (across the CPU sockets)",
                                PciePath::Node => " (through the CPU)",
                                _ => "",
                            },
                            want.label()
                        )
                    },
                ));
                // The NICs a GPU relies on, for the ACS of the bridges on their near paths
                // (said once per bridge, below).
                if near && !served.contains(&n.name) {
                    served.push(n.name.clone());
                }
            }
        }
    }
    // Each bridge on a near path between a served NIC and its GPUs, once: its ACS is read on
    // the NIC's paths, not one GPU's.
    for n in nics.iter().filter(|n| served.contains(&n.name)) {
        for b in &n.acs_unknown {
            let mut x = na(
                Subject::bridge(b),
                "ACS redirect off",
                format!(
                    "ACS of bridge {b} between {} and its GPUs (its extended config space needs root)",
                    n.name
                ),
            );
            x.subject.nic = Some(n.name.clone());
            out.push(x);
        }
        for b in &n.acs_redirect {
            let mut x = finding(
                Status::Fail,
                Subject::bridge(b),
                "ACS redirect on",
                "ACS redirect off",
                format!(
                    "bridge {b} between {} and its GPUs redirects peer traffic (ACS): GPUDirect RDMA detours through the root complex",
                    n.name
                ),
            );
            x.subject.nic = Some(n.name.clone());
            out.push(x);
        }
    }
    out
}

fn gdr(f: &Fabric, expect: &NetworkExpect) -> Vec<Finding> {
    if expect.gdr != Some(true) {
        return vec![];
    }
    let words = f.gdr.describe();
    vec![match f.gdr.ready() {
        Some(true) => finding(
            Status::Pass,
            Subject::node(),
            words.clone(),
            "GPUDirect RDMA",
            format!("GPUDirect RDMA: {words}"),
        ),
        Some(false) => finding(
            Status::Fail,
            Subject::node(),
            "none",
            "GPUDirect RDMA",
            format!("GPUDirect RDMA is missing: {words}; multi-node traffic would be staged through host memory"),
        ),
        None => na(Subject::node(), "GPUDirect RDMA", format!("GPUDirect RDMA: {words}")),
    }]
}

fn counters(cfg: &NetworkCheck, nics: &[&Nic], m: &Measured) -> Vec<Finding> {
    let judged = cfg.judged_counters();
    let mut out = Vec::new();
    for n in nics {
        for p in &n.ports {
            let sub = port_subject(n, p);
            let who = sub.describe();
            let mut rose = Vec::new();
            let mut unknown = Vec::new();
            for c in &judged {
                let Some(before) = p.counters.get(c) else {
                    continue;
                };
                if crate::network::saturated(c, *before) {
                    unknown.push(format!(
                        "{c} is at its largest value ({before}) and cannot rise (clear the port's counters, e.g. perfquery -x -R)"
                    ));
                    continue;
                }
                let after = m.facts.iter().find_map(|f| match &f.value {
                    FactValue::Count(v) if f.name == *c && f.subject == sub => Some(*v),
                    _ => None,
                });
                match after {
                    Some(a) if a < *before => unknown.push(format!(
                        "{c} went back from {before} to {a} (reset during the run)"
                    )),
                    Some(a) if a - before > cfg.max_rise => {
                        rose.push(format!("{c} +{} ({before} -> {a})", a - before))
                    }
                    Some(_) => {}
                    None => unknown.push(format!("{c} not read after the run")),
                }
            }
            // Counters this port does not give: those a suite named are judgements it asked for
            // that cannot run here; of the default list, the port is judged on the rest and the
            // finding names them.
            let absent: Vec<&str> = judged
                .iter()
                .filter(|c| !p.counters.contains_key(*c))
                .map(|c| c.as_str())
                .collect();
            let read = judged.len() - absent.len();
            if cfg.counters.is_some() && !absent.is_empty() {
                unknown.push(format!("{} not given by this port", absent.join(", ")));
            }
            if !rose.is_empty() {
                out.push(finding(
                    Status::Fail,
                    sub.clone(),
                    rose.join(", "),
                    format!("a rise of at most {}", cfg.max_rise),
                    format!(
                        "{who}: error counters rose during the run: {}",
                        rose.join(", ")
                    ),
                ));
            } else if !unknown.is_empty() {
                out.push(na(
                    sub.clone(),
                    "no rise",
                    format!("error counters of {who}: {}", unknown.join("; ")),
                ));
            } else if read == 0 {
                out.push(na(
                    sub.clone(),
                    "no rise",
                    format!("error counters of {who}: none readable"),
                ));
            } else {
                out.push(finding(
                    Status::Pass,
                    sub.clone(),
                    "no rise",
                    format!("a rise of at most {}", cfg.max_rise),
                    if absent.is_empty() {
                        format!("{who}: {read} error counters did not rise during the run")
                    } else {
                        format!(
                            "{who}: {read} error counters did not rise during the run ({} not given by this port)",
                            absent.join(", ")
                        )
                    },
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::{self, SimBackend};
    use crate::inventory::Inventory;
    use crate::platform::nic::{self, GpuAt};

    /// A simulated node's inventory with its NICs read from the sysfs fixture `tree`.
    fn node_with_tree(node: &str, tree: &str) -> Inventory {
        let mut b = SimBackend::new(sim::load_node(node).unwrap(), vec![], 1).unwrap();
        let mut inv = b.inventory().unwrap();
        let at: Vec<GpuAt> = inv
            .gpus
            .iter()
            .map(|g| GpuAt {
                index: g.index,
                pci_bus_id: g.pci_bus_id.clone(),
                numa_node: g.numa_node,
            })
            .collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(tree);
        inv.fabric = Some(nic::read(&root, &at));
        inv
    }

    /// The network check's findings on `inv` under `suite` (TOML extending an embedded one),
    /// with the counters after the run as they were before (`rise` added to one counter).
    fn judge(inv: &Inventory, suite: &str, rise: Option<(&str, &str, u64)>) -> Vec<Finding> {
        let loaded = crate::suite::load::load_source(crate::config::Source {
            name: "t.toml".into(),
            text: suite.into(),
        })
        .unwrap();
        let cfg = loaded.suite.checks.network.clone().unwrap();
        let ctx = crate::testutil::ctx(&loaded.suite, inv);
        let mut m = Measured::default();
        for n in inv.fabric.iter().flat_map(|f| &f.nics) {
            for p in &n.ports {
                for (c, v) in &p.counters {
                    let up = match rise {
                        Some((nic, counter, by)) if nic == n.name && counter == c => by,
                        _ => 0,
                    };
                    m.facts.push(Fact::new(
                        c.clone(),
                        port_subject(n, p),
                        FactValue::Count(v + up),
                    ));
                }
            }
        }
        Network(cfg).evaluate(&ctx, &m)
    }

    fn failed(f: &[Finding]) -> Vec<String> {
        f.iter()
            .filter(|x| x.status == Status::Fail)
            .map(|x| x.reason.clone())
            .collect()
    }

    const H100: &str = "format_version = 1\nname = \"t\"\nextends = \"h100-sxm-8\"\n";

    #[test]
    fn an_hgx_h100_with_8_ndr_nics_at_pix_reads_right_and_passes() {
        let inv = node_with_tree("h100-sxm-8", "hgx-h100-8nic");
        let f = inv.fabric.as_ref().unwrap();
        let names: Vec<&str> = f.nics.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
                "mlx5_8"
            ]
        );
        let n0 = &f.nics[0];
        assert_eq!(n0.pci_bus_id.as_deref(), Some("0000:19:00.0"));
        assert_eq!(n0.numa_node, Some(0));
        assert_eq!(n0.fw_ver.as_deref(), Some("28.39.1002"));
        assert_eq!(n0.node_guid.as_deref(), Some("a088:c203:00b1:4c00"));
        assert_eq!(n0.sys_image_guid.as_deref(), Some("a088:c203:00b1:4c00"));
        let p = &n0.ports[0];
        assert_eq!((p.port, p.rate_gbps), (1, Some(400.0)));
        assert_eq!(p.state_text(), "ACTIVE/LinkUp");
        assert_eq!(p.link_layer.as_deref(), Some("InfiniBand"));
        assert_eq!(p.counters.len(), crate::network::COUNTERS.len() + 1);
        assert_eq!(p.counters[crate::network::CARRIER_CHANGES], 1);
        let nd = p.netdev.as_ref().unwrap();
        assert_eq!(
            (nd.name.as_str(), nd.speed_mbps, nd.mtu),
            ("ib0", Some(400_000), Some(4092))
        );
        assert_eq!(f.nics[2].ports[0].counters["symbol_error"], 3);
        // GPU i's NIC is mlx5_i at PIX; the others NODE on its socket, SYS across.
        use PciePath::*;
        for (i, n) in f.nics.iter().take(8).enumerate() {
            for g in 0..8 {
                let want = if g == i {
                    Pix
                } else if (g < 4) == (i < 4) {
                    Node
                } else {
                    Sys
                };
                assert_eq!(n.gpu_paths[g], Some(want), "{} gpu {g}", n.name);
            }
            assert!(
                n.acs_redirect.is_empty(),
                "{}: {:?}",
                n.name,
                n.acs_redirect
            );
        }
        // The storage NIC on its own root port of socket 0.
        assert_eq!(f.nics[8].gpu_paths[0], Some(Node));
        assert_eq!(f.nics[8].gpu_paths[7], Some(Sys));
        assert_eq!(f.nics[8].ports[0].link_layer.as_deref(), Some("Ethernet"));
        assert_eq!(f.gdr.peermem.as_deref(), Some("580.95.05"));
        assert!(f.unavailable.is_empty(), "{:?}", f.unavailable);

        let all = judge(&inv, H100, None);
        assert!(failed(&all).is_empty(), "{:?}", failed(&all));
        let storage = all
            .iter()
            .find(|x| x.subject.nic.as_deref() == Some("mlx5_8"))
            .unwrap();
        assert!(
            storage.info && storage.reason.contains("link layer is Ethernet"),
            "{storage:?}"
        );
        assert!(all.iter().any(|x| x.reason == "8 InfiniBand RDMA NICs (mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7)"));
        // The counters that rise during the run fail, by NIC, port and counter.
        let f = failed(&judge(&inv, H100, Some(("mlx5_2", "symbol_error", 5))));
        assert_eq!(
            f,
            ["mlx5_2 port 1: error counters rose during the run: symbol_error +5 (3 -> 8)"]
        );
        // A rise the suite allows passes; a counter it does not judge is not judged.
        let allow = format!("{H100}[checks.network]\nmax_rise = 5\n");
        assert!(failed(&judge(&inv, &allow, Some(("mlx5_2", "symbol_error", 5)))).is_empty());
        let only = format!("{H100}[checks.network]\ncounters = [\"link_downed\"]\n");
        assert!(failed(&judge(&inv, &only, Some(("mlx5_2", "symbol_error", 5)))).is_empty());
        // More NICs than stated is a warning; the storage NIC in the fabric makes it 9.
        let eth = format!("{H100}[network]\nlink_layer = \"ethernet\"\nnic_count = 1\nrate_gbps = 200.0\ngpu_nic_path = \"SYS\"\n");
        assert!(failed(&judge(&inv, &eth, None)).is_empty());
        let more = format!("{H100}[network]\nlink_layer = \"infiniband\"\nnic_count = 7\n");
        let all = judge(&inv, &more, None);
        let w: Vec<&Finding> = all.iter().filter(|x| x.status == Status::Warn).collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].reason.contains("more than the 7"), "{}", w[0].reason);
        // Excluded by name or prefix.
        let ex = format!(
            "{H100}[network]\nlink_layer = \"ethernet\"\nexclude = [\"mlx5_*\"]\nnic_count = 1\n"
        );
        let f = failed(&judge(&inv, &ex, None));
        assert_eq!(
            f[0],
            "no Ethernet RDMA NIC is visible; the suite asks for 1"
        );
        // The inherited gpu_nic_path then finds no NIC for any GPU.
        assert_eq!(f.len(), 9, "{f:?}");
        assert_eq!(f[8], "GPU 7 has no fabric NIC to reach");
        // A rate stated with no count and no NIC of the fabric to hold to it fails (the count,
        // where stated, says so already); where devices whose layer cannot be read may be the
        // fabric's, it is not available here. A NIC there is judged port by port.
        let rate = |extra: &str| {
            format!(
                "format_version = 1\nname = \"t\"\nextends = \"base\"\n[network]\n\
                 link_layer = \"infiniband\"\nrate_gbps = 400.0\n{extra}"
            )
        };
        let none = judge(&inv, &rate("exclude = [\"mlx5_*\"]\n"), None);
        assert_eq!(
            failed(&none),
            ["no InfiniBand RDMA NIC of the fabric to hold to the suite's 400 Gb/s"]
        );
        assert_eq!(
            none.iter().filter(|x| x.expected == ">= 400 Gb/s").count(),
            1
        );
        let counted = judge(&inv, &rate("exclude = [\"mlx5_*\"]\nnic_count = 1\n"), None);
        assert_eq!(
            failed(&counted),
            ["no InfiniBand RDMA NIC is visible; the suite asks for 1"]
        );
        let mut unread = inv.clone();
        for n in &mut unread.fabric.as_mut().unwrap().nics {
            for p in &mut n.ports {
                p.link_layer = None;
            }
        }
        let all = judge(&unread, &rate(""), None);
        assert!(failed(&all).is_empty(), "{all:#?}");
        let na: Vec<&Finding> = all.iter().filter(|x| x.expected == ">= 400 Gb/s").collect();
        assert_eq!(na.len(), 1, "{na:#?}");
        assert_eq!(na[0].status, Status::Skip);
        assert!(
            na[0].reason.starts_with(
                "not available here: the fabric's rate: no fabric NIC was found, and 9 whose \
                 link layer cannot be read (mlx5_0, "
            ),
            "{}",
            na[0].reason
        );
        let ib = judge(&inv, &rate(""), None);
        assert!(failed(&ib).is_empty(), "{ib:#?}");
        let ports = ib.iter().filter(|x| x.expected == ">= 400 Gb/s").count();
        assert_eq!(ports, 8, "{ib:#?}");
    }

    #[test]
    fn a_pcie_box_whose_second_nic_is_across_the_socket_fails_for_the_gpus_it_leaves_far() {
        let inv = node_with_tree("l40s-pcie-4", "pcie-box-cross-socket");
        let f = inv.fabric.as_ref().unwrap();
        use PciePath::*;
        assert_eq!(
            f.nics[0].gpu_paths,
            [Some(Pix), Some(Pix), Some(Sys), Some(Sys)]
        );
        assert_eq!(
            f.nics[1].gpu_paths,
            [Some(Node), Some(Node), Some(Sys), Some(Sys)]
        );
        assert_eq!(f.gdr.peermem, None);
        let suite = "format_version = 1\nname = \"t\"\nextends = \"l40s-pcie-4\"\n[network]\nnic_count = 2\nlink_layer = \"ethernet\"\nrate_gbps = 200.0\ngpu_nic_path = \"PXB\"\ngdr = true\n";
        let all = judge(&inv, suite, None);
        assert_eq!(
            failed(&all),
            [
                "GPU 2's nearest NIC is mlx5_0 at SYS (across the CPU sockets): GPUDirect RDMA needs PXB or nearer",
                "GPU 3's nearest NIC is mlx5_0 at SYS (across the CPU sockets): GPUDirect RDMA needs PXB or nearer",
            ]
        );
        // dma-buf was not read from the tree: GPUDirect RDMA is unknown, not ready, not failed.
        let gdr = all
            .iter()
            .find(|x| x.reason.starts_with("not available here: GPUDirect"))
            .unwrap();
        assert_eq!(gdr.status, Status::Skip);
        // An ACS redirect on a switch port between a GPU and its NIC fails by bridge.
        let mut inv2 = inv.clone();
        inv2.fabric.as_mut().unwrap().nics[0].acs_redirect = vec!["0000:3e:00.0".into()];
        let f2 = failed(&judge(&inv2, suite, None));
        // Said once for the NIC, not once per GPU that uses it.
        assert_eq!(f2.len(), 3, "{f2:?}");
        assert!(f2[2].starts_with("bridge 0000:3e:00.0 between mlx5_0 and its GPUs redirects"));
        // A GPU whose relation to the NICs is unknown is not available here, not "no NIC".
        let mut inv3 = inv.clone();
        for n in &mut inv3.fabric.as_mut().unwrap().nics {
            n.gpu_paths[0] = None;
        }
        let all = judge(&inv3, suite, None);
        let g0 = all.iter().find(|x| x.subject == Subject::gpu(0)).unwrap();
        assert_eq!(g0.status, Status::Skip);
        assert_eq!(
            g0.reason,
            "not available here: GPU 0's relation to the NICs"
        );
        // A node with NICs is read even where the suite states no fabric (its ports and
        // counters are judged), and one with none is judged where the suite states one.
        let plain = crate::suite::load::load("l40s-pcie-4").unwrap();
        let ctx = crate::testutil::ctx(&plain.suite, &inv);
        let net = Network(plain.suite.checks.network.clone().unwrap());
        assert!(net.plan(&ctx).is_ok());
        let mut bare = inv.clone();
        bare.fabric.as_mut().unwrap().nics.clear();
        let stated = crate::suite::load::load_source(crate::config::Source {
            name: "t.toml".into(),
            text: suite.into(),
        })
        .unwrap();
        let ctx = crate::testutil::ctx(&stated.suite, &bare);
        assert!(net.plan(&ctx).is_ok());
    }

    #[test]
    fn acs_redirect_read_from_a_switch_port_fails_naming_the_nic_and_the_bridge() {
        let suite = "format_version = 1\nname = \"t\"\nextends = \"l40s-pcie-4\"\n[network]\nnic_count = 2\nlink_layer = \"ethernet\"\nrate_gbps = 200.0\ngpu_nic_path = \"PXB\"\n";
        // Socket 0's switch: P2P redirect above GPU 1 and above mlx5_0, source validation alone
        // (no redirect) above GPU 0; the root port above the switch redirects too, but it is
        // not between them.
        let on = node_with_tree("l40s-pcie-4", "pcie-box-acs-redirect");
        let f = on.fabric.as_ref().unwrap();
        assert_eq!(f.nics[0].acs_redirect, ["0000:3e:01.0", "0000:3e:02.0"]);
        assert!(f.nics[0].acs_unknown.is_empty(), "{:?}", f.nics[0]);
        // mlx5_1 is no nearer than NODE to any GPU: the bridges on its paths are not read.
        assert!(f.nics[1].acs_redirect.is_empty());
        assert!(f.unavailable.is_empty(), "{:?}", f.unavailable);
        let all = judge(&on, suite, None);
        let acs: Vec<&Finding> = all.iter().filter(|x| x.reason.contains("ACS")).collect();
        assert_eq!(acs.len(), 2, "{acs:#?}");
        for (x, b) in acs.iter().zip(["0000:3e:01.0", "0000:3e:02.0"]) {
            assert_eq!(x.status, Status::Fail);
            assert_eq!(x.subject.bridge.as_deref(), Some(b));
            assert_eq!(x.subject.nic.as_deref(), Some("mlx5_0"));
            assert_eq!(
                x.reason,
                format!("bridge {b} between mlx5_0 and its GPUs redirects peer traffic (ACS): GPUDirect RDMA detours through the root complex")
            );
        }
        // The same box with ACS off, and the HGX board: nothing is said about ACS.
        let off = node_with_tree("l40s-pcie-4", "pcie-box-cross-socket");
        let quiet = judge(&off, suite, None);
        assert!(
            quiet.iter().all(|x| !x.reason.contains("ACS")),
            "{quiet:#?}"
        );
        assert_eq!(failed(&quiet).len(), failed(&all).len() - 2);
        let hgx = node_with_tree("h100-sxm-8", "hgx-h100-8nic");
        let quiet = judge(&hgx, H100, None);
        assert!(
            quiet.iter().all(|x| !x.reason.contains("ACS")),
            "{quiet:#?}"
        );
    }

    #[test]
    fn every_config_space_in_the_fixture_trees_is_as_long_as_root_reads_it() {
        let trees = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs");
        let mut seen = 0;
        let mut stack = vec![trees];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let t = e.file_type().unwrap();
                if t.is_dir() {
                    stack.push(e.path());
                } else if t.is_file() && e.file_name() == "config" {
                    let len = e.metadata().unwrap().len();
                    assert_eq!(len, 4096, "{}", e.path().display());
                    seen += 1;
                }
            }
        }
        assert!(seen > 50, "{seen}");
    }

    #[test]
    fn a_nic_whose_link_layer_cannot_be_read_is_neither_counted_nor_judged_but_said() {
        let mut inv = node_with_tree("h100-sxm-8", "hgx-h100-8nic");
        inv.fabric.as_mut().unwrap().nics[4].ports[0].link_layer = None;
        let all = judge(&inv, H100, None);
        assert!(failed(&all).is_empty(), "{:#?}", failed(&all));
        let about = |nic: &str| -> Vec<&Finding> {
            all.iter()
                .filter(|x| x.subject.nic.as_deref() == Some(nic))
                .collect()
        };
        // Said once, as not available here, and never judged: no port, rate or counter of it.
        let m4 = about("mlx5_4");
        assert_eq!(m4.len(), 2, "{m4:#?}");
        assert_eq!(m4[0].status, Status::Skip);
        assert_eq!(m4[0].subject, Subject::nic("mlx5_4", None));
        assert_eq!(
            m4[0].reason,
            "not available here: mlx5_4's link layer cannot be read: whether it is a fabric NIC is unknown, so it is neither counted nor judged"
        );
        assert!(!m4[0].info);
        // GPU 4, whose PIX NIC it is, has no known path to the fabric: not available, not a
        // pass through it and not a failure for the farther NICs it can reach.
        assert_eq!(m4[1].subject, Subject::gpu_nic(4, "mlx5_4"));
        assert_eq!(m4[1].status, Status::Skip);
        assert_eq!(m4[1].found, "PIX");
        assert_eq!(
            m4[1].reason,
            "not available here: GPU 4's path to the fabric: its nearest NIC is mlx5_4 at PIX, and mlx5_4's link layer cannot be read"
        );
        assert_eq!(about("mlx5_3").len(), 4, "{:#?}", about("mlx5_3"));
        // Not counted: 7 known and 1 unknown may be the 8 asked for, or may not.
        let count = all.iter().find(|x| x.reason.contains("NIC count")).unwrap();
        assert_eq!(count.status, Status::Skip);
        assert_eq!(
            count.reason,
            "not available here: the NIC count: 7 InfiniBand RDMA NICs (mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_5, mlx5_6, mlx5_7), and 1 whose link layer cannot be read (mlx5_4): whether the node has the 8 the suite asks for is unknown"
        );
        // It cannot make up a larger shortfall; and where 7 are asked for, 7 known suffice.
        let nine = format!("{H100}[network]\nnic_count = 9\n");
        assert_eq!(
            failed(&judge(&inv, &nine, None)),
            ["7 InfiniBand RDMA NICs (mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_5, mlx5_6, mlx5_7), the suite asks for 9 (mlx5_4 not counted: link layer cannot be read)"]
        );
        let seven = format!("{H100}[network]\nnic_count = 7\n");
        let c7 = judge(&inv, &seven, None);
        let c7 = c7.iter().find(|x| x.expected == "7 NICs").unwrap();
        assert_eq!(c7.status, Status::Pass, "{c7:?}");
        // A layer that is not one nodecert knows, and a NIC with no port, read the same way.
        let mut odd = inv.clone();
        let nics = &mut odd.fabric.as_mut().unwrap().nics;
        nics[4].ports[0].link_layer = Some("Omni-Path".into());
        nics[5].ports.clear();
        let all = judge(&odd, H100, None);
        for (nic, why) in [
            ("mlx5_4", "mlx5_4's link layer cannot be read (\"Omni-Path\" is neither InfiniBand nor Ethernet)"),
            ("mlx5_5", "mlx5_5's link layer cannot be read (no port could be read)"),
        ] {
            let x = all
                .iter()
                .find(|x| x.subject == Subject::nic(nic, None))
                .unwrap();
            assert_eq!(x.status, Status::Skip);
            assert!(x.reason.starts_with(&format!("not available here: {why}: ")), "{}", x.reason);
        }
        assert!(all.iter().any(|x| x
            .reason
            .contains("and 2 whose link layer cannot be read (mlx5_4, mlx5_5)")));
        // GPUs 4 and 5, whose PIX NICs are of unknown layer, have an unknown path; GPU 6,
        // whose fabric NIC is near, passes as before.
        let paths = |g: usize| all.iter().find(|x| x.subject.gpu == Some(g)).unwrap();
        assert_eq!(paths(5).status, Status::Skip);
        assert_eq!(paths(6).status, Status::Pass);
        assert!(failed(&all).is_empty(), "{:#?}", failed(&all));
        // Where the suite states no link layer, the layer does not decide membership: the
        // device is counted and its port judged.
        let any = "format_version = 1\nname = \"t\"\nextends = \"l40s-pcie-4\"\n[network]\nnic_count = 9\n";
        let all = judge(&inv, any, None);
        assert!(
            all.iter().all(|x| !x.reason.contains("link layer")),
            "{all:#?}"
        );
        let c = all.iter().find(|x| x.expected == "9 NICs").unwrap();
        assert_eq!(c.status, Status::Pass);
        assert!(all
            .iter()
            .any(|x| x.subject == Subject::nic("mlx5_4", Some(1)) && x.status == Status::Pass));
    }

    #[test]
    fn nics_that_did_not_answer_are_an_error_never_a_node_without_nics() {
        let mut inv = node_with_tree("h200-vm-1", "vm-no-nic");
        let no = crate::network::NoAnswer {
            file: "/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error".into(),
            nic: Some("mlx5_3".into()),
            port: Some(1),
            waited_s: 5.0,
        };
        inv.fabric = Some(Fabric {
            no_answer: Some(no.clone()),
            ..Default::default()
        });
        // Planned even where the suite states no fabric: not skipped as a node without NICs.
        let plain = crate::suite::load::load("h200-vm-1").unwrap();
        let net = Network(plain.suite.checks.network.clone().unwrap());
        let ctx = crate::testutil::ctx(&plain.suite, &inv);
        assert_eq!(
            net.plan(&ctx).unwrap(),
            [format!(
                "the NICs were not read for the inventory: {}",
                no.describe()
            )]
        );
        // Measured: an error naming the read, without reading the NICs again.
        let mut b = SimBackend::new(sim::load_node("h200-vm-1").unwrap(), vec![], 1).unwrap();
        let e = net.measure(&ctx, &mut b, &mut |_, _| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading the NICs for the inventory (mlx5_3 port 1: /sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error) did not finish within 5 s"
        );
        // Judged: an error about that port, and each stated expectation not available.
        let suite =
            "format_version = 1\nname = \"t\"\nextends = \"h200-vm-1\"\n[network]\nnic_count = 1\n";
        let all = judge(&inv, suite, None);
        assert_eq!(all.len(), 2, "{all:#?}");
        assert_eq!(all[0].status, Status::Error);
        assert_eq!(all[0].subject, Subject::nic("mlx5_3", Some(1)));
        assert_eq!(all[0].reason, no.describe());
        assert_eq!(all[0].expected, "an answer within 5 s");
        assert_eq!(all[1].status, Status::Skip);
        assert_eq!(
            all[1].reason,
            "not available here: NIC count (the NICs did not answer)"
        );
    }

    #[test]
    fn a_vm_with_no_nic_visible_fails_a_fabric_and_skips_without_one() {
        let inv = node_with_tree("h200-vm-1", "vm-no-nic");
        let f = inv.fabric.as_ref().unwrap();
        assert!(f.nics.is_empty());
        assert_eq!(f.gdr.ready(), None);
        let plain = crate::suite::load::load("h200-vm-1").unwrap();
        let ctx = crate::testutil::ctx(&plain.suite, &inv);
        let why = Network(plain.suite.checks.network.clone().unwrap())
            .plan(&ctx)
            .unwrap_err();
        assert_eq!(
            why,
            "no RDMA NIC on this node, and the suite states no fabric"
        );
        let suite = "format_version = 1\nname = \"t\"\nextends = \"h200-vm-1\"\n[network]\nnic_count = 1\ngpu_nic_path = \"PXB\"\n";
        let all = judge(&inv, suite, None);
        assert_eq!(
            failed(&all),
            ["no RDMA NIC is visible; the suite asks for 1"]
        );
        // A passthrough VM's PCI tree is the hypervisor's: its GPU-NIC paths say nothing.
        let paths = all
            .iter()
            .find(|x| x.reason.contains("the GPU-NIC paths: in a"))
            .unwrap();
        assert_eq!(paths.status, Status::Skip, "{paths:?}");
        // NICs that were not read at all: every expectation is not available here.
        let mut none = inv.clone();
        none.fabric = None;
        let all = judge(&none, suite, None);
        assert_eq!(all.len(), 2);
        assert!(all
            .iter()
            .all(|x| x.status == Status::Skip && x.reason.contains("not read")));
    }

    #[test]
    fn a_link_outside_the_tree_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("sys/class/infiniband")).unwrap();
        let outside = t.path().join("elsewhere/mlx5_0");
        std::fs::create_dir_all(outside.join("ports/1")).unwrap();
        std::fs::write(outside.join("ports/1/state"), "4: ACTIVE\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sys/class/infiniband/mlx5_0")).unwrap();
        // Inside the tree, a device whose rate is a FIFO: refused, not read forever.
        let inside = root.join("sys/class/infiniband/mlx5_1/ports/1");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::write(inside.join("state"), "4: ACTIVE\n").unwrap();
        let fifo = inside.join("rate");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let f = nic::read(
            &root,
            &[GpuAt {
                index: 0,
                pci_bus_id: "0000:18:00.0".into(),
                numa_node: None,
            }],
        );
        assert_eq!(f.nics.len(), 2);
        assert_eq!(f.nics[1].ports[0].state.as_deref(), Some("ACTIVE"));
        assert_eq!(f.nics[1].ports[0].rate_gbps, None);
        assert!(f
            .unavailable
            .iter()
            .any(|u| u == "mlx5_1 port 1 rate: not readable"));
        assert_eq!(f.nics[0].gpu_paths, [None]);
        // Nothing below the link is read: not its ports, not their state.
        assert!(f.nics[0].ports.is_empty(), "{:?}", f.nics[0].ports);
        assert!(
            f.unavailable
                .iter()
                .any(|u| u == "mlx5_0: no port could be read"),
            "{:?}",
            f.unavailable
        );
        assert!(
            f.unavailable
                .iter()
                .any(|u| u.contains("mlx5_0: its PCI function is not found")),
            "{:?}",
            f.unavailable
        );
    }

    #[test]
    fn each_simulated_nic_fault_fails_the_network_check_by_name() {
        let reasons = |faults: &[&str]| -> Vec<String> {
            let ev = crate::testutil::simulated("h100-sxm-8", faults);
            let rec = ev.checks.iter().find(|c| c.id == "network").unwrap();
            rec.findings
                .iter()
                .filter(|f| f.status == Status::Fail)
                .map(|f| f.reason.clone())
                .collect()
        };
        assert!(reasons(&[]).is_empty());
        assert_eq!(
            reasons(&["nic-down:nic=3"]),
            ["mlx5_3 port 1 is not up: DOWN/Polling (a cable, a transceiver or the switch port)"]
        );
        assert_eq!(
            reasons(&["nic-downtrained:nic=5"]),
            ["mlx5_5 port 1 trained at 200 Gb/s, below the 400 Gb/s the suite asks for"]
        );
        assert_eq!(
            reasons(&["nic-across-socket:gpu=6"]),
            ["GPU 6's nearest NIC is mlx5_4 at NODE (through the CPU): GPUDirect RDMA needs PXB or nearer"]
        );
        let gdr = reasons(&["no-gdr"]);
        assert_eq!(gdr.len(), 1);
        assert!(gdr[0].starts_with("GPUDirect RDMA is missing"), "{gdr:?}");
        assert_eq!(
            reasons(&["nic-errors:nic=1"]),
            ["mlx5_1 port 1: error counters rose during the run: symbol_error +120 (0 -> 120), link_downed +2 (0 -> 2), port_rcv_errors +37 (0 -> 37), carrier_changes +4 (1 -> 5)"]
        );
    }

    #[test]
    fn nic_faults_need_nics_and_name_them_in_range() {
        let node = || sim::load_node("h100-sxm-8").unwrap();
        let f = |s: &str| crate::backend::sim::Fault::parse(s).unwrap();
        assert!(SimBackend::new(node(), vec![f("nic-down:nic=7")], 1).is_ok());
        let e = SimBackend::new(node(), vec![f("nic-down:nic=8")], 1)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("nic=8 is out of range: the node has 8 NICs"),
            "{e}"
        );
        let e = SimBackend::new(node(), vec![f("no-gdr:nic=1")], 1)
            .err()
            .unwrap();
        assert!(e.to_string().contains("nic= applies to"), "{e}");
        let vm = sim::load_node("h200-vm-1").unwrap();
        let e = SimBackend::new(vm, vec![f("nic-down")], 1).err().unwrap();
        assert!(e.to_string().contains("describes no NICs"), "{e}");
    }

    #[test]
    fn counters_that_stay_pass_and_ones_that_went_back_or_vanished_are_not_available() {
        let inv = node_with_tree("h100-sxm-8", "hgx-h100-8nic");
        let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
        let cfg = loaded.suite.checks.network.clone().unwrap();
        let ctx = crate::testutil::ctx(&loaded.suite, &inv);
        let f = inv.fabric.as_ref().unwrap();
        // After the run: mlx5_2's symbol_error (3 before) reads 1; mlx5_4's link_downed is not
        // read at all; everything else as before.
        let mut m = Measured::default();
        for n in &f.nics {
            for p in &n.ports {
                for (c, v) in &p.counters {
                    let after = match (n.name.as_str(), c.as_str()) {
                        ("mlx5_2", "symbol_error") => Some(1),
                        ("mlx5_4", "link_downed") => None,
                        _ => Some(*v),
                    };
                    if let Some(a) = after {
                        m.facts.push(Fact::new(
                            c.clone(),
                            port_subject(n, p),
                            FactValue::Count(a),
                        ));
                    }
                }
            }
        }
        let all = Network(cfg).evaluate(&ctx, &m);
        let about = |nic: &str| {
            all.iter()
                .find(|x| x.subject == Subject::nic(nic, Some(1)) && x.reason.contains("counters"))
                .unwrap()
        };
        assert_eq!(about("mlx5_0").status, Status::Pass);
        assert_eq!(
            about("mlx5_0").reason,
            "mlx5_0 port 1: 11 error counters did not rise during the run"
        );
        assert_eq!(about("mlx5_2").status, Status::Skip);
        assert!(about("mlx5_2")
            .reason
            .contains("symbol_error went back from 3 to 1 (reset during the run)"));
        assert_eq!(about("mlx5_4").status, Status::Skip);
        assert!(about("mlx5_4")
            .reason
            .contains("link_downed not read after the run"));
    }

    #[test]
    fn counters_a_port_does_not_give_are_named_and_ones_a_suite_asked_for_are_not_available() {
        let mut inv = node_with_tree("h100-sxm-8", "hgx-h100-8nic");
        // mlx5_3's port gives no carrier_changes (no network interface read).
        let f = inv.fabric.as_mut().unwrap();
        assert!(f.nics[3].ports[0]
            .counters
            .remove("carrier_changes")
            .is_some());
        let about = |all: &[Finding], nic: &str| {
            all.iter()
                .find(|x| x.subject == Subject::nic(nic, Some(1)) && x.reason.contains("counters"))
                .unwrap()
                .clone()
        };
        // The default list: judged on the ten it gives, and the finding names the missing one.
        let all = judge(&inv, H100, None);
        let x = about(&all, "mlx5_3");
        assert_eq!(x.status, Status::Pass);
        assert_eq!(
            x.reason,
            "mlx5_3 port 1: 10 error counters did not rise during the run (carrier_changes not given by this port)"
        );
        assert_eq!(
            about(&all, "mlx5_0").reason,
            "mlx5_0 port 1: 11 error counters did not rise during the run"
        );
        // A suite that names the counter asked for a judgement this port cannot give.
        let named =
            format!("{H100}[checks.network]\ncounters = [\"symbol_error\", \"carrier_changes\"]\n");
        let all = judge(&inv, &named, None);
        let x = about(&all, "mlx5_3");
        assert_eq!(x.status, Status::Skip, "{x:?}");
        assert!(
            x.reason.contains("carrier_changes not given by this port"),
            "{x:?}"
        );
        assert_eq!(about(&all, "mlx5_0").status, Status::Pass);
        // A rise on what it does give still fails.
        let f = failed(&judge(&inv, &named, Some(("mlx5_3", "symbol_error", 2))));
        assert_eq!(f.len(), 1, "{f:?}");
    }

    #[test]
    fn saturated_counters_unused_ports_and_unreadable_acs_are_not_passed_as_healthy() {
        let mut inv = node_with_tree("h100-sxm-8", "hgx-h100-8nic");
        let f = inv.fabric.as_mut().unwrap();
        // mlx5_1's symbol_error stuck at 65535 (16 bits) before the run.
        f.nics[1].ports[0]
            .counters
            .insert("symbol_error".into(), 65535);
        // mlx5_3 gets an unused second port; mlx5_5's only port is down.
        let mut spare = f.nics[3].ports[0].clone();
        spare.port = 2;
        spare.state = Some("DOWN".into());
        spare.phys_state = Some("Disabled".into());
        f.nics[3].ports.push(spare);
        f.nics[5].ports[0].state = Some("DOWN".into());
        // mlx5_6's switch port could not be read.
        f.nics[6].acs_unknown = vec!["0000:76:00.0".into()];
        let all = judge(&inv, H100, None);
        let by = |nic: &str, port: Option<u32>, what: &str| {
            all.iter()
                .find(|x| {
                    x.subject.nic.as_deref() == Some(nic)
                        && (port.is_none() || x.subject.port == port)
                        && x.reason.contains(what)
                })
                .unwrap_or_else(|| panic!("{nic} {what}: {all:#?}"))
        };
        let sat = by("mlx5_1", Some(1), "at its largest value (65535)");
        assert_eq!(sat.status, Status::Skip);
        assert_eq!(by("mlx5_3", Some(2), "is not up").status, Status::Warn);
        assert_eq!(by("mlx5_5", Some(1), "is not up").status, Status::Fail);
        let acs = by(
            "mlx5_6",
            None,
            "ACS of bridge 0000:76:00.0 between mlx5_6 and its GPUs",
        );
        assert_eq!(acs.status, Status::Skip);
        assert_eq!(failed(&all).len(), 1, "{:#?}", failed(&all));
        // Where the suite states no fabric, a port down warns.
        let plain = "format_version = 1\nname = \"t\"\nextends = \"l40s-pcie-4\"\n";
        let w = judge(&inv, plain, None);
        assert!(failed(&w).is_empty(), "{:#?}", failed(&w));
        assert!(w
            .iter()
            .any(|x| x.status == Status::Warn && x.reason.starts_with("mlx5_5 port 1 is not up")));
        assert!(crate::network::saturated(
            "excessive_buffer_overrun_errors",
            15
        ));
        assert!(!crate::network::saturated(
            "excessive_buffer_overrun_errors",
            14
        ));
        assert!(!crate::network::saturated("carrier_changes", u64::MAX - 1));
    }
}
