//! Peer-to-peer bandwidth for every ordered GPU pair: read and write copies one way, and both
//! ways at once for every pair.

use super::judge::{finding, fmt_num, judge, outliers_by_class, typical};
use super::verify;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::{Backend, P2pMode};
use crate::error::HwError;
use crate::evidence::{
    Bytes, Convention, Directions, Fact, FactValue, Finding, Metric, Status, Subject, Tool,
};
use crate::suite::{Limit, P2pBandwidthCheck, PathClass};
use crate::units::format_bytes;
use std::collections::BTreeMap;

pub struct P2pBandwidth(pub P2pBandwidthCheck);

/// (metric name, human name) of each figure this check measures.
pub const FIGURES: [(&str, &str); 3] = [
    ("p2p_read", "peer read"),
    ("p2p_write", "peer write"),
    ("p2p_bidir", "peer both ways"),
];

/// How each figure counts, compared with nvbandwidth's peer copy tests: read and write one
/// direction, "both ways" the sum of both directions (nvbandwidth reports one).
pub fn convention(name: &str) -> Option<Convention> {
    let d = match name {
        "p2p_read" | "p2p_write" => Directions::OneWay,
        "p2p_bidir" => Directions::SumOfBoth,
        _ => return None,
    };
    Some(Convention::new(d, Bytes::Once, Tool::Nvbandwidth))
}

/// How a pair connects, as `nvidia-smi topo -m` prints it (NV18, PXB, SYS...): the class of
/// pairs it is compared with by the outlier rule. "?" when the inventory does not say, and for a
/// pair of a GPU whose NVLink state could not be read (its PCIe path is not how it connects if
/// it has links no one saw): held to the check's own bounds, not to a PCIe class's.
pub fn path_class(ctx: &Ctx, s: &Subject) -> String {
    ctx.inventory
        .pair_label(s.gpu.unwrap_or(0), s.peer.unwrap_or(0))
}

impl P2pBandwidth {
    /// The bounds the suite states for each pair: its floors and ceilings, by path class too,
    /// and the outlier rule (which compares pairs).
    fn bounds(&self) -> Vec<String> {
        let c = &self.0;
        let mut b = Vec::new();
        for (name, l) in [("read", &c.read), ("write", &c.write), ("bidir", &c.bidir)] {
            b.extend(super::stated_bounds(name, "GB/s", l));
        }
        for (class, p) in &c.by_path {
            for (name, l) in [("read", &p.read), ("write", &p.write), ("bidir", &p.bidir)] {
                if let Some(l) = l {
                    b.extend(super::stated_bounds(
                        &format!("{} {name}", class.label()),
                        "GB/s",
                        l,
                    ));
                }
            }
        }
        if let Some(p) = c.outlier_pct {
            b.push(format!("each pair within {p}% of the median"));
        }
        b
    }
}

impl Check for P2pBandwidth {
    fn id(&self) -> String {
        "p2p_bandwidth".into()
    }
    fn kind(&self) -> &'static str {
        "p2p_bandwidth"
    }
    fn title(&self) -> String {
        "Peer-to-peer bandwidth".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = super::peer_plan(ctx, &self.bounds())?;
        let c = &self.0;
        Ok(vec![format!(
            "{} ordered pairs x read and write, {} pairs both ways: {} buffers, {} warm-up + {} timed copies",
            n * n.saturating_sub(1),
            n * n.saturating_sub(1) / 2,
            format_bytes(c.size.0),
            c.warmup,
            c.iterations
        )])
    }

    fn measure(
        &self,
        ctx: &Ctx,
        b: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let c = &self.0;
        let pairs = ctx.inventory.ordered_pairs();
        let n = ctx.inventory.gpus.len();
        let total = pairs.len() * 2 + n * n.saturating_sub(1) / 2;
        let mut m = Measured::default();
        let mut done = 0;
        for &(a, z) in &pairs {
            for (mode, name) in [(P2pMode::Read, "read"), (P2pMode::Write, "write")] {
                let s = b.p2p_copy(a, z, mode, c.size.0, c.warmup, c.iterations)?;
                if !s.peer_access && mode == P2pMode::Read {
                    m.facts.push(Fact::new(
                        "peer_access",
                        Subject::pair(a, z),
                        FactValue::PeerAccess(false),
                    ));
                }
                verify::record(
                    &mut m,
                    &format!("p2p_{name}"),
                    Subject::pair(a, z),
                    s.gbps.verified,
                );
                m.metrics.push(
                    Metric::new(
                        &format!("p2p_{name}"),
                        Subject::pair(a, z),
                        "GB/s",
                        s.gbps.values,
                    )
                    .timed(s.gbps.timing)
                    .counted(convention(&format!("p2p_{name}"))),
                );
                done += 1;
                progress(done, total);
            }
        }
        for &(a, z) in pairs.iter().filter(|(a, z)| a < z) {
            let s = b.p2p_copy(a, z, P2pMode::Bidir, c.size.0, c.warmup, c.iterations)?;
            verify::record(&mut m, "p2p_bidir", Subject::pair(a, z), s.gbps.verified);
            m.metrics.push(
                Metric::new("p2p_bidir", Subject::pair(a, z), "GB/s", s.gbps.values)
                    .timed(s.gbps.timing)
                    .counted(convention("p2p_bidir")),
            );
            done += 1;
            progress(done, total);
        }
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        // Read and write per ordered pair, both ways at once per pair.
        let ordered = (gpus * gpus.saturating_sub(1)) as u64;
        (
            (ordered * 2 + ordered / 2) * u64::from(self.0.iterations),
            "checks.p2p_bandwidth.iterations".into(),
        )
    }

    fn remeasure(&self) -> u32 {
        self.0.remeasure
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let c = &self.0;
        let mut out = verify::findings(m, &FIGURES);
        out.extend(super::no_peer_pairs(ctx, &self.bounds()));
        for f in m
            .facts
            .iter()
            .filter(|f| f.name == "peer_access" && f.value == FactValue::PeerAccess(false))
        {
            let (a, z) = (f.subject.gpu.unwrap_or(0), f.subject.peer.unwrap_or(0));
            let bw = m
                .metrics
                .iter()
                .find(|x| x.name == "p2p_read" && x.subject == f.subject)
                .map(|x| fmt_num(x.median))
                .unwrap_or_default();
            out.push(finding(
                if c.require_peer_access { Status::Fail } else { Status::Warn },
                f.subject.clone(),
                "no peer access",
                "peer access",
                format!("peer access disabled between GPU {a} and GPU {z}: copies are staged through host memory ({bw} GB/s)"),
            ).on("p2p_read"));
        }
        for (name, human, limit) in [
            ("p2p_read", "peer read", &c.read),
            ("p2p_write", "peer write", &c.write),
            ("p2p_bidir", "peer both ways", &c.bidir),
        ] {
            let items: Vec<(Subject, String, f64)> = m
                .metrics
                .iter()
                .filter(|x| x.name == name)
                .map(|x| {
                    (
                        x.subject.of_metric(name),
                        path_class(ctx, &x.subject),
                        x.median,
                    )
                })
                .collect();
            // Each pair is judged by its class's limit where the suite states one for this
            // figure, by the check-wide one otherwise; the typical rule takes each group apart.
            let mut groups: BTreeMap<Option<PathClass>, Vec<f64>> = BTreeMap::new();
            for (who, class, v) in &items {
                // A pair of a GPU whose NVLink state could not be read has no known class: its
                // PCIe path, or NVLink of any count. Judged where every limit it could be held to
                // says the same, not judged otherwise; in the check-wide group where the suite
                // states nothing of this figure by class.
                if let Some(unread) = unread_links(ctx, who) {
                    let verdicts: Vec<Option<Finding>> = possible_limits(ctx, c, name, who, limit)
                        .into_iter()
                        .map(|l| judge(who, human, *v, "GB/s", l))
                        .collect();
                    let status = |f: &Option<Finding>| f.as_ref().map(|f| f.status);
                    let agree = verdicts.windows(2).all(|w| status(&w[0]) == status(&w[1]));
                    if c.by_path.values().all(|p| p.for_metric(name).is_none()) {
                        groups.entry(None).or_default().push(*v);
                    }
                    match (agree, classes_with_limits(c, name)) {
                        (true, _) | (false, None) => {
                            out.extend(verdicts.into_iter().next().flatten().map(|f| f.on(name)))
                        }
                        (false, Some(stated)) => out.push(
                            finding(
                                Status::Skip,
                                who.clone(),
                                format!("{} GB/s", fmt_num(*v)),
                                format!("a limit for its path class ({stated})"),
                                format!(
                                    "not available here: {}: {human} not judged: the suite states \
                                     limits by path class ({stated}), and this pair's is not known \
                                     (the NVLink state of {unread} could not be read)",
                                    who.describe()
                                ),
                            )
                            .on(name),
                        ),
                    }
                    continue;
                }
                let (key, limit) = limit_for(c, name, class, limit);
                let what = match key {
                    Some(k) => format!("{human} ({} pair)", k.label()),
                    None => human.to_string(),
                };
                if let Some(f) = judge(who, &what, *v, "GB/s", limit) {
                    out.push(f.on(name));
                } else if let Some(stated) = classes_with_limits(c, name).filter(|_| key.is_none())
                {
                    // The suite judges this figure class by class and states nothing for this
                    // pair's class (an NVLink pair fallen back to PCIe): not judged, and said.
                    out.push(
                        finding(
                            Status::Skip,
                            who.clone(),
                            format!("{} GB/s ({class})", fmt_num(*v)),
                            format!("a limit for {class} pairs"),
                            format!(
                                "{}: {human} not judged: the suite states limits for {stated} \
                                 pairs only, and this pair is {class}",
                                who.describe()
                            ),
                        )
                        .on(name),
                    );
                }
                groups.entry(key).or_default().push(*v);
            }
            if let Some(pct) = c.outlier_pct {
                let (known, left_out) = known_classes(ctx, &items, human);
                out.extend(left_out.map(|f| f.on(name)));
                out.extend(
                    outliers_by_class(&known, pct, true, human, "GB/s")
                        .into_iter()
                        .map(|f| f.on(name)),
                );
            }
            for (key, values) in &groups {
                let (limit, what) = match key {
                    Some(k) => (
                        c.by_path[k].for_metric(name).unwrap_or(limit),
                        format!("{human} of {} pairs", k.label()),
                    ),
                    None => (limit, human.to_string()),
                };
                if let Some(f) = typical(values, limit, true, &what, "GB/s") {
                    out.push(f.on(name));
                }
            }
        }
        out
    }
}

/// The limits of `metric` a pair of unknown links (`who`) could be held to: its PCIe path's
/// class's (or the check-wide one), and each NVLink class's the suite states, with the
/// check-wide one for an NVLink count it states nothing of.
fn possible_limits<'a>(
    ctx: &Ctx,
    c: &'a P2pBandwidthCheck,
    metric: &str,
    who: &Subject,
    wide: &'a Limit,
) -> Vec<&'a Limit> {
    let pcie = ctx
        .inventory
        .pair(who.gpu.unwrap_or(0), who.peer.unwrap_or(0))
        .and_then(|p| p.pcie_path.clone())
        .unwrap_or_default();
    let mut out = vec![limit_for(c, metric, &pcie, wide).1, wide];
    for (k, _) in c
        .by_path
        .iter()
        .filter(|(k, _)| matches!(k, PathClass::Nvlink(_)))
    {
        out.push(limit_for(c, metric, &k.label(), wide).1);
    }
    out
}

/// The GPUs of pair `who` whose NVLink state could not be read ("GPU 2", "GPU 2 and GPU 5"):
/// the pair's links, and so its path class, are not known. None where both were read.
pub fn unread_links(ctx: &Ctx, who: &Subject) -> Option<String> {
    ctx.inventory
        .links_unread_in(who.gpu.unwrap_or(0), who.peer.unwrap_or(0))
}

/// The pairs of `items` (pair, path class, figure) whose path class is known, for the outlier
/// rule, which compares pairs of one class; and where some are not (a GPU whose NVLink state
/// could not be read), the finding that says those were not compared (`what`: the figure).
pub fn known_classes(
    ctx: &Ctx,
    items: &[(Subject, String, f64)],
    what: &str,
) -> (Vec<(Subject, String, f64)>, Option<Finding>) {
    let (unknown, known): (Vec<_>, Vec<_>) = items
        .iter()
        .cloned()
        .partition(|(who, _, _)| unread_links(ctx, who).is_some());
    let gpus: std::collections::BTreeSet<usize> = unknown
        .iter()
        .flat_map(|(who, _, _)| [who.gpu, who.peer])
        .flatten()
        .filter(|i| !ctx.inventory.link_state_read(*i))
        .collect();
    let left_out = (!unknown.is_empty()).then(|| {
        let gpus: Vec<String> = gpus.iter().map(|i| format!("GPU {i}")).collect();
        finding(
            Status::Skip,
            Subject::node(),
            "not available here",
            "compared with the pairs of its path class",
            format!(
                "not available here: the {what} of {} pair{} not compared with the pairs of \
                 their path class: the NVLink state of {} could not be read",
                unknown.len(),
                if unknown.len() == 1 { "" } else { "s" },
                gpus.join(", ")
            ),
        )
    });
    (known, left_out)
}

/// The path classes `[checks.p2p_bandwidth.by_path]` states a limit for `metric` for ("NV18,
/// NV12"); None when it states none, and the check-wide limit is the only one.
fn classes_with_limits(c: &P2pBandwidthCheck, metric: &str) -> Option<String> {
    let stated: Vec<String> = c
        .by_path
        .iter()
        .filter(|(_, l)| {
            l.for_metric(metric)
                .is_some_and(|l| !l.judging().is_empty())
        })
        .map(|(k, _)| k.label())
        .collect();
    (!stated.is_empty()).then(|| stated.join(", "))
}

/// The limit a pair of path class `class` (as [`path_class`] gives it) is judged by for
/// `metric`: its class's, keyed by the class, where the suite states one; else `wide`. A class
/// that states only what is typical for the figure (no bound) keys the pair's group, whose
/// median is held against that typical value, but each pair is still held to `wide`'s bounds:
/// stating what is typical of a class does not lift the floor every pair is held to.
fn limit_for<'a>(
    c: &'a P2pBandwidthCheck,
    metric: &str,
    class: &str,
    wide: &'a Limit,
) -> (Option<PathClass>, &'a Limit) {
    PathClass::parse(class)
        .and_then(|k| Some((k, c.by_path.get(&k)?.for_metric(metric)?)))
        .map_or((None, wide), |(k, l)| {
            (Some(k), if l.judging().is_empty() { wide } else { l })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A four-GPU PCIe box on two sockets: pairs 0-1 and 2-3 near (NODE), the rest across (SYS),
    /// each read measured at `bw(a, b)`.
    fn judge_box(bw: impl Fn(usize, usize) -> f64, cfg: &str) -> Vec<Finding> {
        let (suite, inv, m) = crate::testutil::pcie_box("p2p_read", "GB/s", true, bw);
        let ctx = crate::testutil::ctx(&suite, &inv);
        let cfg: P2pBandwidthCheck = toml::from_str(cfg).unwrap();
        P2pBandwidth(cfg)
            .evaluate(&ctx, &m)
            .into_iter()
            .filter(|f| f.metric.as_deref() == Some("p2p_read") && f.status != Status::Pass)
            .collect()
    }

    /// The peer-access findings of the four-GPU box when `facts` were recorded and each read
    /// was measured at `bw(a, b)`.
    fn peer_access(facts: &[(usize, usize, &str)], cfg: &str) -> Vec<Finding> {
        let (suite, inv, mut m) = crate::testutil::pcie_box("p2p_read", "GB/s", false, |a, b| {
            if (a, b) == (1, 3) {
                9.5
            } else {
                26.0
            }
        });
        let ctx = crate::testutil::ctx(&suite, &inv);
        for &(a, b, value) in facts {
            m.facts.push(Fact::new(
                "peer_access",
                Subject::pair(a, b),
                FactValue::from_legacy("peer_access", value),
            ));
        }
        let cfg: P2pBandwidthCheck = toml::from_str(cfg).unwrap();
        P2pBandwidth(cfg)
            .evaluate(&ctx, &m)
            .into_iter()
            .filter(|f| f.found == "no peer access")
            .collect()
    }

    #[test]
    fn a_pair_without_peer_access_is_named_with_its_own_bandwidth() {
        let f = peer_access(&[(1, 3, "disabled")], "");
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].subject.describe(), "GPU 1 -> GPU 3");
        assert_eq!(
            f[0].reason,
            "peer access disabled between GPU 1 and GPU 3: copies are staged through host \
             memory (9.50 GB/s)"
        );
        // Only warned about when the suite allows it.
        let f = peer_access(&[(1, 3, "disabled")], "require_peer_access = false");
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Warn);
        // A peer-access record that does not say "disabled" is no finding.
        assert!(peer_access(&[(0, 1, "enabled")], "").is_empty());
        assert!(peer_access(&[], "").is_empty());
    }

    fn healthy(a: usize, b: usize) -> f64 {
        if a / 2 == b / 2 {
            26.0
        } else {
            21.6
        }
    }

    #[test]
    fn cross_socket_pairs_are_compared_with_cross_socket_pairs() {
        // 17% apart: the far pairs are healthy for far pairs.
        let f = judge_box(healthy, "outlier_pct = 15.0");
        assert!(f.is_empty(), "{f:#?}");
        // One far pair 25% under its class fails, named, against its class.
        let f = judge_box(
            |a, b| healthy(a, b) * if (a, b) == (1, 3) { 0.75 } else { 1.0 },
            "outlier_pct = 15.0",
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].subject.describe(), "GPU 1 -> GPU 3");
        assert!(
            f[0].reason.contains("median of SYS pairs"),
            "{}",
            f[0].reason
        );
    }

    /// The four-GPU box with pairs 0-1 and 2-3 behind one switch (PIX) and the rest across
    /// sockets (SYS), each read at `bw(a, b)`, judged by `cfg`: the findings that are not a pass.
    fn judge_pix_sys(bw: impl Fn(usize, usize) -> f64, cfg: &str) -> Vec<Finding> {
        let (suite, mut inv, m) = crate::testutil::pcie_box("p2p_read", "GB/s", true, bw);
        for p in &mut inv.pairs {
            if p.a / 2 == p.b / 2 {
                p.pcie_path = Some("PIX".into());
            }
        }
        let ctx = crate::testutil::ctx(&suite, &inv);
        let cfg: P2pBandwidthCheck = toml::from_str(cfg).unwrap();
        P2pBandwidth(cfg)
            .evaluate(&ctx, &m)
            .into_iter()
            .filter(|f| f.metric.as_deref() == Some("p2p_read") && f.status != Status::Pass)
            .collect()
    }

    /// A pair of a GPU whose NVLink state could not be read has no known path class: its PCIe
    /// path, or links no one saw. It is judged where every limit it could be held to says the
    /// same (a NODE pair below the check-wide floor, which no class lifts; any pair where one
    /// limit holds every class), not judged where they differ (a SYS pair between the SYS floor
    /// and the check-wide one); the outlier rule leaves it out, and says so.
    #[test]
    fn a_pair_whose_links_were_not_all_read_is_judged_only_where_its_class_does_not_matter() {
        let judge = |unread: bool, cfg: &str| {
            let (suite, mut inv, m) =
                crate::testutil::pcie_box("p2p_read", "GB/s", true, |_, _| 20.0);
            if unread {
                inv.gpus[2]
                    .unavailable
                    .push(crate::inventory::Reading::NvlinkState);
            }
            let ctx = crate::testutil::ctx(&suite, &inv);
            assert_eq!(
                path_class(&ctx, &Subject::pair(0, 2)),
                if unread { "?" } else { "SYS" }
            );
            assert_eq!(path_class(&ctx, &Subject::pair(0, 1)), "NODE");
            let cfg: P2pBandwidthCheck = toml::from_str(cfg).unwrap();
            P2pBandwidth(cfg)
                .evaluate(&ctx, &m)
                .into_iter()
                .filter(|f| f.metric.as_deref() == Some("p2p_read") && f.status != Status::Pass)
                .collect::<Vec<Finding>>()
        };
        let pairs = |f: &[Finding], s: Status| {
            let mut p: Vec<(usize, usize)> = f
                .iter()
                .filter(|x| x.status == s && x.subject.peer.is_some())
                .map(|x| (x.subject.gpu.unwrap(), x.subject.peer.unwrap()))
                .collect();
            p.sort();
            p
        };
        // Every pair at 20: the NODE pairs (0-1, 2-3) miss the wide 24, the SYS pairs hold 18.
        let read = judge(false, BY_PATH);
        assert_eq!(pairs(&read, Status::Fail), [(0, 1), (1, 0), (2, 3), (3, 2)]);
        let f = judge(true, BY_PATH);
        assert_eq!(pairs(&f, Status::Fail), [(0, 1), (1, 0), (2, 3), (3, 2)]);
        assert_eq!(pairs(&f, Status::Skip), [(0, 2), (1, 2), (2, 0), (2, 1)]);
        // An NVLink class stated too: a SYS pair at 20 is below its floor of 300 as well.
        let nv = format!("{BY_PATH}[by_path.NV18]\nread = {{ fail_below = 300.0 }}\n");
        let with_nv = judge(true, &nv);
        assert_eq!(
            pairs(&with_nv, Status::Skip),
            [(0, 2), (1, 2), (2, 0), (2, 1)]
        );
        let low = |v: f64| {
            let (suite, mut inv, m) =
                crate::testutil::pcie_box("p2p_read", "GB/s", true, move |_, _| v);
            inv.gpus[2]
                .unavailable
                .push(crate::inventory::Reading::NvlinkState);
            let ctx = crate::testutil::ctx(&suite, &inv);
            let cfg: P2pBandwidthCheck = toml::from_str(&nv).unwrap();
            P2pBandwidth(cfg)
                .evaluate(&ctx, &m)
                .into_iter()
                .filter(|f| f.subject == Subject::pair(0, 2).of_metric("p2p_read"))
                .map(|f| f.status)
                .collect::<Vec<Status>>()
        };
        // Below every floor it could be held to: failed whatever its class.
        assert_eq!(low(2.0), [Status::Fail]);
        assert!(f.iter().any(|x| x.reason
            == "not available here: GPU 0 -> GPU 2: peer read not judged: the suite states \
                limits by path class (SYS), and this pair's is not known (the NVLink state of \
                GPU 2 could not be read)"));
        // One limit for every class: it judges those pairs too.
        let wide = "read = { fail_below = 24.0 }\n";
        assert_eq!(pairs(&judge(true, wide), Status::Fail).len(), 12);
        // The outlier rule compares the others and says which it left out.
        let outliers = "read = { fail_below = 1.0 }\noutlier_pct = 10.0\n";
        assert!(judge(false, outliers).is_empty());
        let f = judge(true, outliers);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            f[0].reason,
            "not available here: the peer read of 6 pairs not compared with the pairs of their \
             path class: the NVLink state of GPU 2 could not be read"
        );
    }

    const BY_PATH: &str = "read = { fail_below = 24.0 }\n\
                           [by_path.SYS]\n\
                           read = { fail_below = 18.0, typical = 22.1 }\n";

    fn pix_sys(a: usize, b: usize) -> f64 {
        if a / 2 == b / 2 {
            26.3
        } else {
            22.1
        }
    }

    /// The mixed box's figures with one ordered pair at `v`.
    fn one_pair_at(pair: (usize, usize), v: f64) -> impl Fn(usize, usize) -> f64 {
        move |a, b| if (a, b) == pair { v } else { pix_sys(a, b) }
    }

    #[test]
    fn each_pair_is_held_to_its_path_class_floor() {
        // A SYS pair at SYS speed passes its SYS floor although it is under the check-wide one.
        let f = judge_pix_sys(pix_sys, BY_PATH);
        assert!(f.is_empty(), "{f:#?}");
        // A PIX pair at SYS speed fails: it is held to the check-wide floor, not to SYS's.
        let f = judge_pix_sys(one_pair_at((2, 3), 22.1), BY_PATH);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].subject.describe().as_str(), f[0].status),
            ("GPU 2 -> GPU 3", Status::Fail)
        );
        assert!(
            f[0].reason.contains("below the floor of 24.0 GB/s"),
            "{}",
            f[0].reason
        );
        // A SYS pair under the SYS floor fails, the class named in the reason.
        let f = judge_pix_sys(one_pair_at((1, 3), 16.5), BY_PATH);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].subject.describe(), "GPU 1 -> GPU 3");
        assert!(
            f[0].reason
                .contains("peer read (SYS pair) 16.5 GB/s is below the floor of 18.0 GB/s"),
            "{}",
            f[0].reason
        );
        // Without by_path (suites written before), the one floor holds every pair: SYS fails.
        let f = judge_pix_sys(pix_sys, "read = { fail_below = 24.0 }");
        assert_eq!(f.len(), 8, "{f:#?}");
        assert!(f.iter().all(|f| f.status == Status::Fail));
        // A class the suite states no figure for keeps the check-wide limit for that figure.
        let f = judge_pix_sys(
            pix_sys,
            "read = { fail_below = 24.0 }\n[by_path.SYS]\nwrite = { fail_below = 1.0 }",
        );
        assert_eq!(f.len(), 8, "{f:#?}");
        // Nor does a class whose only floor is 0 (it bounds nothing): the wide floor holds it.
        let f = judge_pix_sys(
            pix_sys,
            "read = { fail_below = 24.0 }\n[by_path.SYS]\nread = { fail_below = 0.0 }",
        );
        assert_eq!(f.len(), 8, "{f:#?}");
        assert!(f.iter().all(|f| f.status == Status::Fail), "{f:#?}");
        // With no wide floor, no bound judges the figure anywhere: nothing is said.
        let f = judge_pix_sys(pix_sys, "[by_path.SYS]\nread = { fail_below = 0.0 }");
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn a_pair_of_a_class_the_suite_states_nothing_for_is_said_not_judged() {
        // Limits for SYS pairs only, none check-wide: the PIX pairs are measured but nothing
        // judges them, and each says so (a skip that leaves the check partial), however slow.
        let only_sys = "[by_path.SYS]\nread = { fail_below = 18.0 }\n";
        let f = judge_pix_sys(one_pair_at((2, 3), 1.0), only_sys);
        assert_eq!(f.len(), 4, "{f:#?}");
        assert!(
            f.iter().all(|f| f.status == Status::Skip && !f.info),
            "{f:#?}"
        );
        let slow = f.iter().find(|f| f.subject.describe() == "GPU 2 -> GPU 3");
        assert_eq!(
            slow.map(|f| f.reason.as_str()),
            Some(
                "GPU 2 -> GPU 3: peer read not judged: the suite states limits for SYS pairs \
                 only, and this pair is PIX"
            ),
            "{f:#?}"
        );
        // A check-wide limit judges them: nothing is left unjudged.
        let f = judge_pix_sys(
            pix_sys,
            &format!("read = {{ fail_below = 24.0 }}\n{only_sys}"),
        );
        assert!(f.is_empty(), "{f:#?}");
        // The pair's class states only what is typical of it: the typical rule judges its
        // group, and no pair is said unjudged.
        let f = judge_pix_sys(
            pix_sys,
            &format!("{only_sys}[by_path.PIX]\nread = {{ typical = 26.3 }}\n"),
        );
        assert!(f.is_empty(), "{f:#?}");
        // With a check-wide floor as well, a class that states only what is typical of it
        // does not lift that floor: its one slow pair fails, though its median is typical.
        let typical_pix = format!(
            "read = {{ fail_below = 18.0 }}\n{only_sys}[by_path.PIX]\nread = {{ typical = 26.3 }}\n"
        );
        assert!(judge_pix_sys(pix_sys, &typical_pix).is_empty());
        let f = judge_pix_sys(one_pair_at((2, 3), 1.0), &typical_pix);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].subject.describe().as_str(), f[0].status),
            ("GPU 2 -> GPU 3", Status::Fail)
        );
        assert!(
            f[0].reason.contains("peer read (PIX pair)"),
            "{}",
            f[0].reason
        );
        // No limit for this figure anywhere: the suite did not ask, and nothing is said.
        let f = judge_pix_sys(pix_sys, "[by_path.SYS]\nwrite = { fail_below = 1.0 }");
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn an_nvlink_class_has_its_own_floor() {
        // H100 NVL-like: pairs 0-1 and 2-3 joined by 12 links, the rest by 18. A 12-link pair
        // at 257 GB/s passes its NV12 floor; an 18-link pair at the same speed fails.
        let (suite, mut inv, m) = crate::testutil::pcie_box("p2p_read", "GB/s", false, |a, b| {
            if a / 2 == b / 2 || (a, b) == (1, 3) {
                257.0
            } else {
                376.0
            }
        });
        for p in &mut inv.pairs {
            p.nvlinks = if p.a / 2 == p.b / 2 { 12 } else { 18 };
        }
        let ctx = crate::testutil::ctx(&suite, &inv);
        let cfg: P2pBandwidthCheck = toml::from_str(
            "read = { fail_below = 335.0 }\n[by_path.NV12]\nread = { fail_below = 230.0 }",
        )
        .unwrap();
        let f: Vec<Finding> = P2pBandwidth(cfg)
            .evaluate(&ctx, &m)
            .into_iter()
            .filter(|f| f.metric.as_deref() == Some("p2p_read") && f.status != Status::Pass)
            .collect();
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].subject.describe(), "GPU 1 -> GPU 3");
        assert!(
            f[0].reason.contains("below the floor of 335"),
            "{}",
            f[0].reason
        );
    }

    #[test]
    fn a_path_class_typical_is_held_against_that_class_alone() {
        // Every SYS pair 15% slow: above its floor, but its class's median is under 0.9 x typical.
        let f = judge_pix_sys(
            |a, b| pix_sys(a, b) * if a / 2 == b / 2 { 1.0 } else { 0.85 },
            BY_PATH,
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].subject.describe().as_str(), f[0].status),
            ("node", Status::Warn)
        );
        assert!(
            f[0].reason.contains("peer read of SYS pairs"),
            "{}",
            f[0].reason
        );
    }

    #[test]
    fn a_uniformly_slow_box_is_warned_about_against_typical() {
        let cfg = "outlier_pct = 15.0\nread = { fail_below = 10.0, typical = 24.0 }";
        let f = judge_box(|a, b| healthy(a, b) * 0.8, cfg);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].subject.describe().as_str(), f[0].status),
            ("node", Status::Warn)
        );
        assert!(judge_box(healthy, cfg).is_empty());
    }
}
