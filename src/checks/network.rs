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
use crate::suite::{LinkLayer, NetworkCheck, NetworkExpect, PciePath};

pub struct Network(pub NetworkCheck);

/// The RDMA devices that make up the fabric: not excluded, of the stated link layer (a device
/// whose first port's layer cannot be read is kept: it is judged, not silently dropped).
pub fn fabric_nics<'a>(f: &'a Fabric, expect: &NetworkExpect) -> Vec<&'a Nic> {
    f.nics
        .iter()
        .filter(|n| !expect.excludes(&n.name))
        .filter(|n| match (expect.link_layer, layer(n)) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        })
        .collect()
}

fn layer(n: &Nic) -> Option<LinkLayer> {
    n.ports
        .first()
        .and_then(|p| p.link_layer.as_deref())
        .and_then(LinkLayer::of_kernel)
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
                Err("not available here: the NICs were not read (this node's description has none), and the suite states no fabric".into())
            } else {
                Ok(vec!["the suite states a fabric, but the NICs were not read: each expectation is not available here".into()])
            };
        };
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
        if ctx.inventory.fabric.is_none() {
            progress(1, 1);
            return Ok(m);
        }
        let after = backend.fabric(&ctx.inventory.gpus)?;
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
            return not_read(expect);
        };
        let mut out = Vec::new();
        let nics = fabric_nics(f, expect);
        // Devices left out of the fabric are said, so a NIC of the wrong layer is seen.
        for n in f
            .nics
            .iter()
            .filter(|n| !nics.iter().any(|x| x.name == n.name))
        {
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
        out.extend(count(&nics, expect));
        for n in &nics {
            out.extend(ports(n, expect));
        }
        out.extend(gpu_paths(ctx, &nics, expect));
        out.extend(gdr(f, expect));
        out.extend(counters(&self.0, &nics, m));
        out
    }
}

/// Every stated expectation, when the NICs could not be read at all.
fn not_read(expect: &NetworkExpect) -> Vec<Finding> {
    let why = "the NICs were not read";
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

fn count(nics: &[&Nic], expect: &NetworkExpect) -> Vec<Finding> {
    let Some(want) = expect.nic_count else {
        return vec![];
    };
    let have = nics.len();
    let layer = expect
        .link_layer
        .map(|l| format!(" {}", l.kernel_name()))
        .unwrap_or_default();
    let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
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
            Status::Fail if have == 0 => format!("no{layer} RDMA NIC is visible; the suite asks for {want}"),
            Status::Fail => format!(
                "{have}{layer} RDMA NICs ({}), the suite asks for {want}",
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
            Some(false) => out.push(finding(
                Status::Fail,
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

fn gpu_paths(ctx: &Ctx, nics: &[&Nic], expect: &NetworkExpect) -> Vec<Finding> {
    let Some(want) = expect.gpu_nic_path else {
        return vec![];
    };
    let mut out = Vec::new();
    for g in &ctx.inventory.gpus {
        let sub = Subject::gpu(g.index);
        let expected = format!("a NIC at {} or nearer", want.label());
        match Fabric::nearest(nics, g.index) {
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
                if near {
                    for b in &n.acs_redirect {
                        let mut x = finding(
                            Status::Fail,
                            Subject::bridge(b),
                            "ACS redirect on",
                            "ACS redirect off",
                            format!(
                                "bridge {b} between GPU {} and {} redirects peer traffic (ACS): GPUDirect RDMA detours through the root complex",
                                g.index, n.name
                            ),
                        );
                        x.subject.nic = Some(n.name.clone());
                        out.push(x);
                    }
                }
            }
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
            let read = judged
                .iter()
                .filter(|c| p.counters.contains_key(*c))
                .count();
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
                    format!("{who}: {read} error counters did not rise during the run"),
                ));
            }
        }
    }
    out
}
