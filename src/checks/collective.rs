//! NCCL collectives over all GPUs, swept over message sizes, with nccl-tests' algbw and busbw,
//! and the result data checked (any wrong element fails).

use super::judge::{finding, fmt_num};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{
    Bytes, Convention, Directions, Fact, FactValue, Finding, Metric, Status, Subject, Tool,
};
use crate::suite::{CollectiveCheck, CollectiveOp};
use crate::units::{format_bytes, size_sweep};

pub struct Collective {
    pub op: CollectiveOp,
    pub cfg: CollectiveCheck,
}

/// (metric name, human name) of each bandwidth figure this check measures.
pub const FIGURES: [(&str, &str); 2] =
    [("algbw", "algorithm bandwidth"), ("busbw", "bus bandwidth")];

/// How each figure counts: as nccl-tests computes it, algbw over the bytes of the message
/// once, busbw times the collective's bus factor.
pub fn convention(name: &str) -> Option<Convention> {
    let b = match name {
        "algbw" => Bytes::Once,
        "busbw" => Bytes::BusFactor,
        _ => return None,
    };
    Some(Convention::new(Directions::OneWay, b, Tool::NcclTests))
}

/// algbw in GB/s for `bytes` moved in `time_us` (nccl-tests: size / time).
pub fn algbw_gbps(bytes: u64, time_us: f64) -> f64 {
    if time_us <= 0.0 {
        return f64::NAN;
    }
    bytes as f64 / (time_us * 1e-6) / 1e9
}

/// busbw = algbw x the collective's factor for `ranks` (nccl-tests doc/PERFORMANCE.md).
pub fn busbw_gbps(op: CollectiveOp, ranks: usize, bytes: u64, time_us: f64) -> f64 {
    algbw_gbps(bytes, time_us) * op.busbw_factor(ranks)
}

impl Check for Collective {
    fn id(&self) -> String {
        format!("collective.{}", self.op)
    }
    fn kind(&self) -> &'static str {
        "collective"
    }
    fn title(&self) -> String {
        format!("NCCL {}", self.op)
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = ctx.inventory.gpus.len();
        if n == 0 {
            return Err("no GPUs".into());
        }
        let c = &self.cfg;
        let sizes = size_sweep(c.min_size.0, c.max_size.0, c.factor);
        let mut p = vec![format!(
            "{} over {n} rank{}: {} sizes from {} to {} (x{}), {} warm-up + {} timed, data checked",
            self.op,
            if n == 1 { "" } else { "s" },
            sizes.len(),
            format_bytes(c.min_size.0),
            format_bytes(c.max_size.0),
            c.factor,
            c.warmup,
            c.iterations
        )];
        if n == 1 {
            p.push("one rank: bus bandwidth is 0 by definition; only the data is judged".into());
        }
        Ok(p)
    }

    fn measure(
        &self,
        _: &Ctx,
        b: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let c = &self.cfg;
        let sizes = size_sweep(c.min_size.0, c.max_size.0, c.factor);
        let mut m = Measured::default();
        for (i, &s) in sizes.iter().enumerate() {
            let r = b.collective(self.op, s, c.warmup, c.iterations)?;
            super::positive_times(
                &format!("{} at {}", self.op, format_bytes(s)),
                "us",
                &r.time_us,
            )?;
            // Bandwidth over the bytes really moved (nccl-tests' count), which for a size not
            // divisible into 16-byte blocks per rank is a little less than `s`.
            let moved = r.bytes;
            let algbw: Vec<f64> = r.time_us.iter().map(|t| algbw_gbps(moved, *t)).collect();
            let busbw: Vec<f64> = r
                .time_us
                .iter()
                .map(|t| busbw_gbps(self.op, r.ranks, moved, *t))
                .collect();
            m.metrics
                .push(Metric::new("time", Subject::size(s), "us", r.time_us));
            m.metrics.push(
                Metric::new("algbw", Subject::size(s), "GB/s", algbw).counted(convention("algbw")),
            );
            m.metrics.push(
                Metric::new("busbw", Subject::size(s), "GB/s", busbw).counted(convention("busbw")),
            );
            if moved != s {
                m.facts.push(Fact::new(
                    "bytes_moved",
                    Subject::size(s),
                    FactValue::Count(moved),
                ));
            }
            m.facts.push(Fact::new(
                "wrong_elements",
                Subject::size(s),
                FactValue::Elements {
                    wrong: r.wrong_elements,
                    checked: r.elements_checked,
                },
            ));
            if i == 0 {
                m.facts.push(Fact::new(
                    "ranks",
                    Subject::node(),
                    FactValue::Count(r.ranks as u64),
                ));
            }
            progress(i + 1, sizes.len());
        }
        Ok(m)
    }

    fn samples(&self, _gpus: usize) -> (u64, String) {
        // Time, algbw and busbw per size.
        let c = &self.cfg;
        let sizes = size_sweep(c.min_size.0, c.max_size.0, c.factor).len() as u64;
        (
            sizes * 3 * u64::from(c.iterations),
            format!("checks.collective.{}.iterations", self.op),
        )
    }

    fn remeasure(&self) -> u32 {
        self.cfg.remeasure
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let c = &self.cfg;
        let op = self.op;
        let mut out = Vec::new();
        let ranks: usize = m
            .facts
            .iter()
            .find(|f| f.name == "ranks")
            .and_then(|f| f.value.count())
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(ctx.inventory.gpus.len());
        // Correct data first: a fast wrong answer fails.
        out.extend(data_findings(op, m));
        if ranks < 2 {
            out.push(
                finding(
                    Status::Skip,
                    Subject::op(op),
                    "1 rank",
                    "bus bandwidth floors",
                    format!(
                        "{op}: one rank, bus bandwidth is 0 by definition: floors not applicable"
                    ),
                )
                .informational(),
            );
            return out;
        }
        use crate::inventory::NvlsAvailability;
        use crate::suite::NvlsRequirement;
        let mut floor_map = &c.min_busbw_gbps;
        let mut warn_map = &c.warn_busbw_gbps;
        let no_warns = std::collections::BTreeMap::new();
        match (c.nvls, ctx.inventory.nvls()) {
            (None, _) | (Some(_), NvlsAvailability::Available) => {}
            // The cause, not a bus bandwidth that only follows from it.
            (Some(NvlsRequirement::Required), NvlsAvailability::Unknown(why)) => {
                out.push(nvls_required(
                    op,
                    "NVLS availability unknown",
                    format!("NVLS required but its availability is unknown: {why}"),
                ));
                return out;
            }
            (Some(NvlsRequirement::Required), NvlsAvailability::Unavailable(why)) => {
                out.push(nvls_required(
                    op,
                    "NVLS not available",
                    format!("NVLS not available: {why}"),
                ));
                return out;
            }
            (Some(NvlsRequirement::IfAvailable), NvlsAvailability::Unavailable(why))
            | (Some(NvlsRequirement::IfAvailable), NvlsAvailability::Unknown(why)) => {
                out.push(
                    finding(
                        Status::Pass,
                        Subject::op(op),
                        "NVLS not available",
                        "NVLS if available",
                        format!("NVLS not available ({why}): judged by min_busbw_gbps_no_nvls"),
                    )
                    .informational(),
                );
                floor_map = &c.min_busbw_gbps_no_nvls;
                // Warning levels are stated for NVLS: they do not apply to the ring.
                warn_map = &no_warns;
            }
        }
        let floors = CollectiveCheck::floors(floor_map);
        let warns = CollectiveCheck::floors(warn_map);
        let busbw: Vec<&Metric> = m.metrics.iter().filter(|x| x.name == "busbw").collect();
        for x in &busbw {
            let s = x.subject.bytes.unwrap_or(0);
            let fl = CollectiveCheck::floor_for(&floors, s);
            let wl = CollectiveCheck::floor_for(&warns, s);
            if fl.is_none() && wl.is_none() {
                continue;
            }
            let limit = crate::suite::Limit {
                fail_below: fl,
                warn_below: wl,
                ..Default::default()
            };
            if let Some(f) = super::judge::judge(
                &Subject::op_size(op, s),
                "bus bandwidth",
                x.median,
                "GB/s",
                &limit,
            ) {
                out.push(f.on("busbw"));
            }
        }
        if let Some(frac) = c.min_fraction_of_p2p {
            let slowest = ctx
                .earlier
                .iter()
                .find(|r| r.id == "p2p_bandwidth")
                .map(|r| {
                    r.metrics
                        .iter()
                        .filter(|x| x.name == "p2p_read")
                        .map(|x| x.median)
                        .collect::<Vec<_>>()
                })
                .filter(|v| !v.is_empty())
                .map(|v| v.into_iter().fold(f64::INFINITY, f64::min));
            let largest = busbw.iter().max_by_key(|x| x.subject.bytes.unwrap_or(0));
            match (slowest, largest) {
                (Some(p2p), Some(x)) => {
                    let need = frac * p2p;
                    let ok = x.median >= need;
                    let s = format_bytes(x.subject.bytes.unwrap_or(0));
                    out.push(finding(
                        if ok { Status::Pass } else { Status::Fail },
                        Subject::op_size(op, x.subject.bytes.unwrap_or(0)),
                        format!("{} GB/s", fmt_num(x.median)),
                        format!(">= {} x slowest peer read {} = {} GB/s", fmt_num(frac), fmt_num(p2p), fmt_num(need)),
                        format!(
                            "{op} at {s}: bus bandwidth {} GB/s is {} {} x the slowest peer path ({} GB/s)",
                            fmt_num(x.median),
                            if ok { "at least" } else { "below" },
                            fmt_num(frac),
                            fmt_num(p2p)
                        ),
                    ));
                }
                _ => out.push(finding(
                    Status::Skip,
                    Subject::op(op),
                    "no peer measurements",
                    "relative floor",
                    format!("{op}: min_fraction_of_p2p needs the p2p_bandwidth check's results"),
                )),
            }
        }
        out
    }
}

/// The failure of a collective that requires NVLink SHARP on a node without it.
fn nvls_required(op: CollectiveOp, measured: &str, reason: String) -> Finding {
    finding(
        Status::Fail,
        Subject::op(op),
        measured,
        "NVLink SHARP required",
        reason,
    )
    .on("nvls")
}

/// The data judgement: every size's result checked, none wrong. A size whose count cannot be
/// read, or where nothing was checked, proves nothing about the data: an error, never a pass.
fn data_findings(op: CollectiveOp, m: &Measured) -> Vec<Finding> {
    let mut out = Vec::new();
    let facts: Vec<&Fact> = m
        .facts
        .iter()
        .filter(|f| f.name == "wrong_elements")
        .collect();
    let mut checked_total = 0u64;
    let mut good = true;
    for f in &facts {
        let at = f.subject.describe();
        let who = match f.subject.bytes {
            Some(b) => Subject::op_size(op, b),
            None => Subject::op(op),
        };
        let counts = match f.value {
            FactValue::Elements { wrong, checked } => Some((wrong, checked)),
            _ => None,
        };
        match counts {
            None => {
                good = false;
                let v = f.value.describe();
                out.push(finding(
                    Status::Error,
                    who,
                    format!("'{v}'"),
                    "wrong/checked element counts",
                    format!(
                        "{op} at {at}: the data check's result '{v}' is not an element count, so the data was not proven correct"
                    ),
                ));
            }
            Some((_, 0)) => {
                good = false;
                out.push(finding(
                    Status::Error,
                    who,
                    "0 elements checked",
                    "every element checked",
                    format!("{op} at {at}: no element of the result was checked"),
                ));
            }
            Some((w, t)) if w > 0 => {
                good = false;
                out.push(finding(
                    Status::Fail,
                    who,
                    format!("{w} wrong of {t}"),
                    "0 wrong elements",
                    format!("{op} at {at}: {w} of {t} elements wrong after the collective"),
                ));
            }
            Some((_, t)) => checked_total += t,
        }
    }
    if facts.is_empty() {
        out.push(finding(
            Status::Error,
            Subject::op(op),
            "no data check",
            "0 wrong elements",
            format!("{op}: no size's result was checked, so the data was not proven correct"),
        ));
    } else if good {
        out.push(finding(
            Status::Pass,
            Subject::op(op),
            "0 wrong elements",
            "0 wrong elements",
            format!("{op}: data correct at every size ({checked_total} elements checked)"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_formulas_match_nccl_tests() {
        // 1 GiB in 4 ms: algbw 268.4 GB/s; all_reduce on 8 ranks x 1.75.
        let a = algbw_gbps(1 << 30, 4000.0);
        assert!((a - 268.435).abs() < 0.01, "{a}");
        let b = busbw_gbps(CollectiveOp::AllReduce, 8, 1 << 30, 4000.0);
        assert!((b - 469.76).abs() < 0.01, "{b}");
        assert_eq!(busbw_gbps(CollectiveOp::AllReduce, 1, 1 << 30, 4000.0), 0.0);
    }

    /// all_gather over 8 ranks at 1000 B: 250 floats, 31 per rank, rounded down to 28, so
    /// 896 B move (nccl-tests' size column), and the bandwidth is that over the time.
    #[test]
    fn bandwidth_counts_the_bytes_nccl_tests_counts() {
        use crate::backend::sim::{load_node, SimBackend};
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let ctx = Ctx {
            suite: &ev.suite.resolved,
            inventory: &ev.node,
            earlier: &[],
            simulated: true,
        };
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 3).unwrap();
        for (size, moved) in [(1000u64, 896u64), (4096, 4096)] {
            let cfg: CollectiveCheck =
                toml::from_str(&format!("min_size = {size}\nmax_size = {size}")).unwrap();
            let check = Collective {
                op: CollectiveOp::AllGather,
                cfg,
            };
            let m = check.measure(&ctx, &mut b, &mut |_, _| {}).unwrap();
            let metric = |name: &str| m.metrics.iter().find(|x| x.name == name).unwrap();
            let (t, alg) = (&metric("time").samples, &metric("algbw").samples);
            for (t, a) in t.iter().zip(alg) {
                assert!((a - algbw_gbps(moved, *t)).abs() < 1e-12, "{size}: {a}");
            }
            let fact = m.facts.iter().find(|f| f.name == "bytes_moved");
            assert_eq!(
                fact.map(|f| f.value.clone()),
                (moved != size).then_some(FactValue::Count(896))
            );
        }
    }
}

#[cfg(test)]
mod data_tests {
    use super::*;

    fn measured(values: &[&str]) -> Measured {
        Measured {
            metrics: vec![],
            facts: values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    Fact::new(
                        "wrong_elements",
                        Subject::size(1 << (10 + i)),
                        FactValue::from_legacy("wrong_elements", v),
                    )
                })
                .collect(),
        }
    }

    fn statuses(values: &[&str]) -> Vec<Status> {
        data_findings(CollectiveOp::AllReduce, &measured(values))
            .iter()
            .map(|f| f.status)
            .collect()
    }

    #[test]
    fn correct_data_at_every_size_passes() {
        let f = data_findings(CollectiveOp::AllReduce, &measured(&["0/256", "0/512"]));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Pass);
        assert!(
            f[0].reason.contains("768 elements checked"),
            "{}",
            f[0].reason
        );
    }

    #[test]
    fn one_wrong_element_fails_naming_the_size() {
        let f = data_findings(CollectiveOp::AllReduce, &measured(&["0/256", "1/512"]));
        assert_eq!(f.len(), 1, "no pass beside a failure: {f:?}");
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].subject.describe(), "all_reduce 2 KiB");
    }

    #[test]
    fn a_malformed_count_is_an_error_not_zero_wrong() {
        for bad in ["", "x/256", "3", "1/y", "-1/256"] {
            assert_eq!(statuses(&["0/256", bad]), vec![Status::Error], "{bad:?}");
        }
    }

    #[test]
    fn nothing_checked_is_an_error_not_correct_data() {
        assert_eq!(statuses(&["0/0"]), vec![Status::Error]);
        assert_eq!(statuses(&[]), vec![Status::Error]);
    }
}
