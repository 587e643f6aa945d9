//! NCCL collectives over all GPUs, swept over message sizes, with nccl-tests' algbw and busbw,
//! and the result data checked (any wrong element fails).

use super::judge::{finding, fmt_num};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::backend::CollectiveSample;
use crate::error::HwError;
use crate::evidence::{
    Bytes, Convention, Directions, Fact, FactValue, Finding, Metric, Status, Subject, Tool,
};
use crate::suite::{CollectiveCheck, CollectiveOp, NvlsRequirement};
use crate::units::{format_bytes, size_sweep};

pub struct Collective {
    pub op: CollectiveOp,
    pub cfg: CollectiveCheck,
}

/// (metric name, human name) of each bandwidth figure this check measures. The `_no_nvls`
/// figures are all_reduce's second pass with NVLink SHARP forced off (`NCCL_NVLS_ENABLE=0`),
/// measured only where the node can use NVLS (see [`Collective::second_pass`]).
pub const FIGURES: [(&str, &str); 4] = [
    ("algbw", "algorithm bandwidth"),
    ("busbw", "bus bandwidth"),
    ("algbw_no_nvls", "algorithm bandwidth, NVLS forced off"),
    ("busbw_no_nvls", "bus bandwidth, NVLS forced off"),
];

/// How each figure counts: as nccl-tests computes it, algbw over the bytes of the message
/// once, busbw times the collective's bus factor (with or without NVLS alike).
pub fn convention(name: &str) -> Option<Convention> {
    let b = match name {
        "algbw" | "algbw_no_nvls" => Bytes::Once,
        "busbw" | "busbw_no_nvls" => Bytes::BusFactor,
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

/// Suffix of the metrics and facts of the pass with NVLS forced off.
pub const NO_NVLS: &str = "_no_nvls";

/// The fact naming the sweep's sizes that move nothing over this many ranks (not measured).
pub const EMPTY_SIZES: &str = "sizes_moving_nothing";
/// Fact: why all_reduce's pass with NVLS forced off was not measured (it runs in a second
/// process, which GPUs that admit one process only refuse while nodecert holds them).
pub const NO_NVLS_BLOCKED: &str = "no_nvls_pass_not_run";

/// The refusal of the pass with NVLS forced off, as plan and findings say it.
fn refused(why: &str) -> String {
    format!(
        "that sweep runs in a second process, which the GPUs refuse while nodecert holds them: \
         {why}"
    )
}

/// The sweep's sizes that move at least one element over `ranks`, and those that do not: an
/// all_gather, reduce_scatter or all_to_all gives each rank a block of a multiple of 16 bytes,
/// so below 16 bytes a rank the collective is empty (nccl-tests prints it as size 0, and NCCL
/// returns at once without moving anything): no time to measure, no data to check.
pub fn moving_sizes(op: CollectiveOp, ranks: usize, sizes: &[u64]) -> (Vec<u64>, Vec<u64>) {
    sizes
        .iter()
        .partition(|&&s| crate::backend::cuda::verify::layout(op, ranks, s).counted_bytes > 0)
}

impl Collective {
    /// Whether all_reduce is measured a second time with NVLS forced off: where the node can use
    /// NVLS (NCCL's choice is then the NVLS figure), and, for a suite that judges the figure
    /// without NVLS (`nvls = "off"`), also where whether it can is unknown. Where NVLS is not
    /// available NCCL's own figure already is the one without it.
    pub fn second_pass(&self, ctx: &Ctx) -> bool {
        use crate::inventory::NvlsAvailability as A;
        self.op == CollectiveOp::AllReduce
            && ctx.inventory.gpus.len() > 1
            && match ctx.inventory.nvls() {
                A::Available => true,
                A::Unknown(_) => self.cfg.nvls == Some(NvlsRequirement::Off),
                A::Unavailable(_) => false,
            }
    }

    /// Why the pass with NVLS forced off, which this node would get, cannot run here: the GPUs
    /// admit one process only, and that pass runs in a second one.
    fn second_pass_refused(&self, ctx: &Ctx) -> Option<String> {
        self.second_pass(ctx)
            .then(|| ctx.inventory.one_process_only())
            .flatten()
    }

    /// Record one size's sample: time, algbw and busbw (named with `suffix`), the bytes moved
    /// where they differ from the size, and the data check.
    fn record(
        &self,
        m: &mut Measured,
        s: u64,
        r: &CollectiveSample,
        suffix: &str,
    ) -> Result<(), HwError> {
        let pass = if suffix.is_empty() {
            ""
        } else {
            " with NVLS forced off"
        };
        super::positive_times(
            &format!("{} at {}{pass}", self.op, format_bytes(s)),
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
        let name = |n: &str| format!("{n}{suffix}");
        m.metrics.push(Metric::new(
            &name("time"),
            Subject::size(s),
            "us",
            r.time_us.clone(),
        ));
        for (n, v) in [("algbw", algbw), ("busbw", busbw)] {
            let n = name(n);
            let conv = convention(&n);
            m.metrics
                .push(Metric::new(&n, Subject::size(s), "GB/s", v).counted(conv));
        }
        if moved != s && suffix.is_empty() {
            m.facts.push(Fact::new(
                "bytes_moved",
                Subject::size(s),
                FactValue::Count(moved),
            ));
        }
        m.facts.push(Fact::new(
            name("wrong_elements"),
            Subject::size(s),
            FactValue::Elements {
                wrong: r.wrong_elements,
                checked: r.elements_checked,
            },
        ));
        Ok(())
    }
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

    fn does_not_fit(&self, gpus: usize) -> Option<(crate::config::KeyPath, String)> {
        // One rank too: its data check needs a size that moves something.
        let c = &self.cfg;
        let sweep = size_sweep(c.min_size.0, c.max_size.0, c.factor);
        let (moving, _) = moving_sizes(self.op, gpus, &sweep);
        if gpus == 0 || !moving.is_empty() {
            return None;
        }
        // The smallest size of the sweep's own steps (min_size x factor^k) that moves data over
        // this many ranks: a max_size the sweep reaches.
        let need = size_sweep(c.min_size.0, u64::MAX, c.factor)
            .into_iter()
            .find(|&s| !moving_sizes(self.op, gpus, &[s]).0.is_empty())
            .unwrap_or(u64::MAX);
        Some((
            crate::suite::collective_path(self.op, "max_size"),
            format!(
                "no size of the sweep ({} to {}) moves data over {gpus} rank{} (under 16 bytes \
                 a rank, nothing moves): raise max_size to at least {}",
                format_bytes(c.min_size.0),
                format_bytes(c.max_size.0),
                if gpus == 1 { "" } else { "s" },
                format_bytes(need)
            ),
        ))
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = ctx.inventory.gpus.len();
        if n == 0 {
            return Err("no GPUs".into());
        }
        let c = &self.cfg;
        let sweep = size_sweep(c.min_size.0, c.max_size.0, c.factor);
        let (_, empty) = moving_sizes(self.op, n, &sweep);
        let mut p = vec![format!(
            "{} over {n} rank{}: {} sizes from {} to {} (x{}), {} warm-up + {} timed, data checked",
            self.op,
            if n == 1 { "" } else { "s" },
            sweep.len(),
            format_bytes(c.min_size.0),
            format_bytes(c.max_size.0),
            c.factor,
            c.warmup,
            c.iterations
        )];
        if n == 1 {
            p.push("one rank: bus bandwidth is 0 by definition; only the data is judged".into());
        }
        if let (Some(first), Some(last)) = (empty.first(), empty.last()) {
            p.push(format!(
                "{} to {} not measured: under 16 bytes a rank over {n} ranks, nothing moves",
                format_bytes(*first),
                format_bytes(*last)
            ));
        }
        if let Some(why) = self.second_pass_refused(ctx) {
            p.push(format!(
                "not measured with NVLS forced off: {}",
                refused(&why)
            ));
        } else if self.second_pass(ctx) {
            p.push(format!(
                "then the same sizes with NVLS forced off (NCCL_NVLS_ENABLE=0, a child process \
                 on real GPUs){}",
                if c.nvls == Some(NvlsRequirement::Off) {
                    ": the floors apply to that figure"
                } else {
                    ""
                }
            ));
        }
        Ok(p)
    }

    fn measure(
        &self,
        ctx: &Ctx,
        b: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let c = &self.cfg;
        let sweep = size_sweep(c.min_size.0, c.max_size.0, c.factor);
        let (sizes, empty) = moving_sizes(self.op, ctx.inventory.gpus.len(), &sweep);
        let mut m = Measured::default();
        let refusal = self.second_pass_refused(ctx);
        let second = self.second_pass(ctx) && refusal.is_none();
        if let Some(why) = refusal {
            // The child that forces NVLS off would be refused the GPUs this process holds.
            m.facts.push(Fact::new(
                NO_NVLS_BLOCKED,
                Subject::node(),
                FactValue::Text(why),
            ));
        }
        let steps = sizes.len() + usize::from(second);
        super::nccl_env::record(
            &mut m,
            &b.nccl_settings(),
            super::nccl_env::Scope::Node,
            &ctx.suite.nccl.accept,
        );
        if !empty.is_empty() {
            let list: Vec<String> = empty.iter().map(|&s| format_bytes(s)).collect();
            m.facts.push(Fact::new(
                EMPTY_SIZES,
                Subject::node(),
                FactValue::Text(list.join(", ")),
            ));
        }
        for (i, &s) in sizes.iter().enumerate() {
            let r = b.collective(self.op, s, c.warmup, c.iterations)?;
            self.record(&mut m, s, &r, "")?;
            if i == 0 {
                m.facts.push(Fact::new(
                    "ranks",
                    Subject::node(),
                    FactValue::Count(r.ranks as u64),
                ));
            }
            progress(i + 1, steps);
        }
        if second {
            // The same sweep with NVLS forced off: the ring/tree figure beside NCCL's choice.
            let rs = b.collective_no_nvls(self.op, &sizes, c.warmup, c.iterations)?;
            if rs.len() != sizes.len() {
                return Err(HwError::Call {
                    call: format!("{} with NVLS forced off", self.op),
                    detail: format!("{} results for {} sizes", rs.len(), sizes.len()),
                });
            }
            for (&s, r) in sizes.iter().zip(&rs) {
                self.record(&mut m, s, r, NO_NVLS)?;
            }
            progress(steps, steps);
        }
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        // Time, algbw and busbw per size that moves something.
        let c = &self.cfg;
        let sweep = size_sweep(c.min_size.0, c.max_size.0, c.factor);
        let sizes = moving_sizes(self.op, gpus, &sweep).0.len() as u64;
        // all_reduce may be measured twice (NVLS as NCCL chooses, and forced off).
        let passes = if self.op == CollectiveOp::AllReduce {
            2
        } else {
            1
        };
        (
            sizes * 3 * passes * u64::from(c.iterations),
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
        let second = m.metrics.iter().any(|x| x.name.ends_with(NO_NVLS))
            || m.facts.iter().any(|f| f.name.ends_with(NO_NVLS));
        if let Some(f) = m.facts.iter().find(|f| f.name == EMPTY_SIZES) {
            out.push(
                finding(
                    Status::Skip,
                    Subject::op(op),
                    "nothing to move",
                    "at least 16 bytes a rank",
                    format!(
                        "{op}: {} not measured: over {ranks} ranks each rank's block is under 16 \
                         bytes, so the collective moves nothing (nccl-tests prints these as size 0)",
                        f.value.describe()
                    ),
                )
                .informational(),
            );
        }
        let blocked = m
            .facts
            .iter()
            .find(|f| f.name == NO_NVLS_BLOCKED)
            .map(|f| refused(&f.value.describe()));
        if let (Some(why), false) = (&blocked, c.nvls == Some(NvlsRequirement::Off)) {
            out.push(
                finding(
                    Status::Skip,
                    Subject::op(op),
                    "not available here",
                    "a figure with NVLS forced off",
                    format!(
                        "{op} with NVLS forced off: not available here ({why}); NCCL's own \
                         figure is judged"
                    ),
                )
                .informational()
                .on("busbw_no_nvls"),
            );
        }
        // Correct data first, in both passes: a fast wrong answer fails.
        out.extend(data_findings(op, m, ""));
        if second {
            out.extend(data_findings(op, m, NO_NVLS));
        }
        if ranks < 2 {
            // Floors the suite states and this node cannot be held to are a judgement promised
            // and not made (the run is partial); with none stated, a note. A floor of 0 judges
            // nothing anywhere, so it is not one promised.
            let stated = [&c.min_busbw_gbps, &c.warn_busbw_gbps]
                .iter()
                .flat_map(|m| m.values())
                .filter(|v| **v > 0.0)
                .count();
            let f = finding(
                Status::Skip,
                Subject::op(op),
                "1 rank",
                "bus bandwidth floors",
                if stated == 0 {
                    format!(
                        "{op}: one rank, bus bandwidth is 0 by definition: floors not applicable"
                    )
                } else {
                    format!(
                        "not available here: {op} on one rank, whose bus bandwidth is 0 by \
                         definition: the suite's {stated} bus bandwidth floor{} not judged",
                        if stated == 1 { " was" } else { "s were" }
                    )
                },
            );
            out.push(if stated == 0 { f.informational() } else { f });
            return out;
        }
        use crate::inventory::NvlsAvailability as A;
        let mut floor_map = &c.min_busbw_gbps;
        let mut warn_map = &c.warn_busbw_gbps;
        let no_warns = std::collections::BTreeMap::new();
        // The figure the floors apply to: NCCL's choice, or the pass with NVLS forced off.
        let mut judged = "busbw";
        match (c.nvls, ctx.inventory.nvls()) {
            // Whether NVLS is there was not read: that requirement is not available here (never
            // a failure of a node whose NVLS may well be fine), and NCCL's own figure is still
            // held to the floors, which a node without NVLS misses.
            (Some(NvlsRequirement::Required), A::Unknown(why)) => {
                out.push(
                    finding(
                        Status::Skip,
                        Subject::op(op),
                        "not available here",
                        "NVLink SHARP required",
                        format!(
                            "not available here: whether NVLS is available ({why}), which the \
                             suite requires; the bus bandwidth is judged as NCCL measured it"
                        ),
                    )
                    .on("nvls"),
                );
            }
            // The cause, not a bus bandwidth that only follows from it.
            (Some(NvlsRequirement::Required), A::Unavailable(why)) => {
                out.push(nvls_required(
                    op,
                    "NVLS not available",
                    format!("NVLS not available: {why}"),
                ));
                return out;
            }
            (Some(NvlsRequirement::IfAvailable), A::Unavailable(why) | A::Unknown(why)) => {
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
            (Some(NvlsRequirement::Off), _) if second => {
                judged = "busbw_no_nvls";
                out.push(
                    finding(
                        Status::Pass,
                        Subject::op(op),
                        "NVLS forced off",
                        "NVLS off",
                        format!(
                            "{op}: judged on the figure with NVLS forced off \
                             (NCCL_NVLS_ENABLE=0, nvls = \"off\")"
                        ),
                    )
                    .informational(),
                );
            }
            (Some(NvlsRequirement::Off), A::Unavailable(why)) => {
                out.push(
                    finding(
                        Status::Pass,
                        Subject::op(op),
                        "NVLS not available",
                        "NVLS off",
                        format!(
                            "NVLS not available ({why}): NCCL's figure is the one without NVLS"
                        ),
                    )
                    .informational(),
                );
            }
            (Some(NvlsRequirement::Off), _) => {
                // NVLS may have been used and nothing was measured without it.
                out.push(
                    finding(
                        Status::Error,
                        Subject::op(op),
                        "no figure with NVLS forced off",
                        "NVLS off",
                        match &blocked {
                            Some(why) => format!(
                                "{op}: the suite judges the figure without NVLS, but it cannot \
                                 be measured here: {why}"
                            ),
                            None => format!(
                                "{op}: the suite judges the figure without NVLS, but none was \
                                 measured, and NCCL's own may have used NVLS"
                            ),
                        },
                    )
                    .on("nvls"),
                );
                return out;
            }
            (None, _) | (Some(_), A::Available) => {}
        }
        // From here on, the findings judge figures NCCL produced (its data was judged above).
        let figures_from = out.len();
        let floors = CollectiveCheck::floors(floor_map);
        let warns = CollectiveCheck::floors(warn_map);
        let what = if judged == "busbw" {
            "bus bandwidth"
        } else {
            "bus bandwidth with NVLS forced off"
        };
        let busbw: Vec<&Metric> = m.metrics.iter().filter(|x| x.name == judged).collect();
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
            if let Some(f) =
                super::judge::judge(&Subject::op_size(op, s), what, x.median, "GB/s", &limit)
            {
                out.push(f.on(judged));
            }
        }
        if second && judged == "busbw" {
            out.extend(what_nvls_buys(op, m));
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
        super::nccl_env::steer(m, &mut out[figures_from..]);
        out.extend(super::nccl_env::note(m, &op.to_string()));
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

/// The NVLS figure beside the one with NVLS forced off, at the largest size: information for
/// the reader (what NVLS buys on this node), not a judgement.
fn what_nvls_buys(op: CollectiveOp, m: &Measured) -> Option<Finding> {
    let off = m
        .metrics
        .iter()
        .filter(|x| x.name == "busbw_no_nvls")
        .max_by_key(|x| x.subject.bytes.unwrap_or(0))?;
    let on = m
        .metrics
        .iter()
        .find(|x| x.name == "busbw" && x.subject == off.subject)?;
    let s = format_bytes(off.subject.bytes.unwrap_or(0));
    let gain = if off.median > 0.0 {
        format!(
            " (NVLS adds {}%)",
            fmt_num((on.median / off.median - 1.0) * 100.0)
        )
    } else {
        String::new()
    };
    Some(
        finding(
            Status::Pass,
            Subject::op_size(op, off.subject.bytes.unwrap_or(0)),
            format!("{} GB/s", fmt_num(off.median)),
            "information",
            format!(
                "{op} at {s}: bus bandwidth {} GB/s with NVLS forced off, {} GB/s as NCCL \
                 chose{gain}",
                fmt_num(off.median),
                fmt_num(on.median)
            ),
        )
        .informational()
        .on("busbw_no_nvls"),
    )
}

/// The data judgement of one pass (`suffix` "" for NCCL's choice, [`NO_NVLS`] for the pass with
/// NVLS forced off): every size's result checked, none wrong. A size whose count cannot be
/// read, or where nothing was checked, proves nothing about the data: an error, never a pass.
fn data_findings(op: CollectiveOp, m: &Measured, suffix: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let name = format!("wrong_elements{suffix}");
    let pass = if suffix.is_empty() {
        ""
    } else {
        " with NVLS forced off"
    };
    let facts: Vec<&Fact> = m.facts.iter().filter(|f| f.name == name).collect();
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
                        "{op} at {at}{pass}: the data check's result '{v}' is not an element count, so the data was not proven correct"
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
                    format!("{op} at {at}{pass}: no element of the result was checked"),
                ));
            }
            Some((w, t)) if w > 0 => {
                good = false;
                out.push(finding(
                    Status::Fail,
                    who,
                    format!("{w} wrong of {t}"),
                    "0 wrong elements",
                    format!("{op} at {at}{pass}: {w} of {t} elements wrong after the collective"),
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
            format!("{op}{pass}: no size's result was checked, so the data was not proven correct"),
        ));
    } else if good {
        out.push(finding(
            Status::Pass,
            Subject::op(op),
            "0 wrong elements",
            "0 wrong elements",
            format!("{op}{pass}: data correct at every size ({checked_total} elements checked)"),
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
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
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

    /// NVLS required where whether it is there was not read: not available here (the run is
    /// partial), and the figure measured is still judged against the floors, which can fail it.
    #[test]
    fn nvls_required_but_unknown_is_not_available_and_the_floors_still_judge() {
        use crate::backend::sim::{load_node, SimBackend};
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let mut inv = ev.node.clone();
        inv.gpus[3].nvls.multicast = None;
        assert!(matches!(
            inv.nvls(),
            crate::inventory::NvlsAvailability::Unknown(_)
        ));
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &inv);
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 3).unwrap();
        let judge = |floor: f64, b: &mut SimBackend| {
            let check = Collective {
                op: CollectiveOp::AllReduce,
                cfg: toml::from_str(&format!(
                    "min_size = \"1GiB\"\nmax_size = \"1GiB\"\nnvls = \"required\"\n\
                     min_busbw_gbps = {{ \"1GiB\" = {floor} }}"
                ))
                .unwrap(),
            };
            let m = check.measure(&ctx, b, &mut |_, _| {}).unwrap();
            check.evaluate(&ctx, &m)
        };
        let f = judge(100.0, &mut b);
        let nvls: Vec<&Finding> = f
            .iter()
            .filter(|x| x.metric.as_deref() == Some("nvls"))
            .collect();
        assert_eq!(nvls.len(), 1, "{f:#?}");
        assert_eq!(nvls[0].status, Status::Skip);
        assert!(
            nvls[0].reason.starts_with(
                "not available here: whether NVLS is available (GPU 3: multicast support not read)"
            ),
            "{}",
            nvls[0].reason
        );
        assert!(f.iter().all(|x| x.status != Status::Fail), "{f:#?}");
        assert!(
            f.iter()
                .any(|x| x.status == Status::Pass && x.is_judgement()),
            "{f:#?}"
        );
        // A floor the figure misses fails it, whatever NVLS is.
        let f = judge(10_000.0, &mut b);
        assert!(f.iter().any(|x| x.status == Status::Fail), "{f:#?}");
    }

    #[test]
    fn sizes_under_16_bytes_a_rank_move_nothing_and_are_not_measured() {
        let sweep = size_sweep(8, 256, 2);
        // all_reduce and broadcast move every element at every size.
        for op in [CollectiveOp::AllReduce, CollectiveOp::Broadcast] {
            assert_eq!(moving_sizes(op, 8, &sweep), (sweep.clone(), vec![]));
        }
        // The others give each rank a multiple of 16 bytes: 128 B over 8 ranks, 16 B over 1.
        for op in [
            CollectiveOp::AllGather,
            CollectiveOp::ReduceScatter,
            CollectiveOp::AllToAll,
        ] {
            assert_eq!(
                moving_sizes(op, 8, &sweep),
                (vec![128, 256], vec![8, 16, 32, 64])
            );
            assert_eq!(moving_sizes(op, 1, &sweep), (sweep[1..].to_vec(), vec![8]));
        }
        // On the simulated 8-GPU node (whose collectives hold as many elements as NCCL's would):
        // a sweep from 8 B checks data at every size it measures, and says what it left out.
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        use crate::backend::sim::{load_node, SimBackend};
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 3).unwrap();
        let check = Collective {
            op: CollectiveOp::AllGather,
            cfg: toml::from_str("min_size = \"8B\"\nmax_size = \"256B\"").unwrap(),
        };
        let m = check.measure(&ctx, &mut b, &mut |_, _| {}).unwrap();
        let mut sizes: Vec<Subject> = m.metrics.iter().map(|x| x.subject.clone()).collect();
        sizes.dedup();
        assert_eq!(sizes, [Subject::size(128), Subject::size(256)]);
        let f = check.evaluate(&ctx, &m);
        assert!(f.iter().all(|x| x.status != Status::Error), "{f:#?}");
        let note = f.iter().find(|x| x.found == "nothing to move").unwrap();
        assert_eq!(
            note.reason,
            "all_gather: 8 B, 16 B, 32 B, 64 B not measured: over 8 ranks each rank's block is \
             under 16 bytes, so the collective moves nothing (nccl-tests prints these as size 0)"
        );
        assert!(!note.is_judgement());
        // Those sizes, measured anyway, hold nothing to check: an error, as on real GPUs.
        let empty = b.collective(CollectiveOp::AllGather, 64, 1, 1).unwrap();
        assert_eq!(empty.elements_checked, 0);
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
        data_findings(CollectiveOp::AllReduce, &measured(values), "")
            .iter()
            .map(|f| f.status)
            .collect()
    }

    #[test]
    fn correct_data_at_every_size_passes() {
        let f = data_findings(CollectiveOp::AllReduce, &measured(&["0/256", "0/512"]), "");
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
        let f = data_findings(CollectiveOp::AllReduce, &measured(&["0/256", "1/512"]), "");
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
    fn wrong_data_with_nvls_forced_off_fails_naming_that_pass() {
        let mut m = measured(&["0/256"]);
        m.facts.push(Fact {
            name: "wrong_elements_no_nvls".into(),
            subject: Subject::size(1 << 10),
            value: FactValue::Elements {
                wrong: 2,
                checked: 256,
            },
        });
        let main = data_findings(CollectiveOp::AllReduce, &m, "");
        assert_eq!(
            main.iter().map(|f| f.status).collect::<Vec<_>>(),
            [Status::Pass]
        );
        let off = data_findings(CollectiveOp::AllReduce, &m, NO_NVLS);
        assert_eq!(off.len(), 1);
        assert_eq!(off[0].status, Status::Fail);
        assert_eq!(
            off[0].reason,
            "all_reduce at 1 KiB with NVLS forced off: 2 of 256 elements wrong after the collective"
        );
    }

    /// Which nodes get the second pass, and `nvls = "off"` where whether NVLS was used is not
    /// known and nothing was measured without it: an error, never NCCL's figure judged as the
    /// one without NVLS.
    #[test]
    fn the_second_pass_follows_nvls_availability() {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let mut inv = ev.node.clone();
        let check = |nvls: Option<NvlsRequirement>, op: CollectiveOp| Collective {
            op,
            cfg: CollectiveCheck {
                nvls,
                ..toml::from_str("").unwrap()
            },
        };
        let ctx = |inv: &'_ crate::inventory::Inventory| -> bool {
            let c = Ctx {
                suite: &ev.suite.resolved,
                inventory: inv,
                earlier: &[],
                simulated: true,
            };
            check(Some(NvlsRequirement::Off), CollectiveOp::AllReduce).second_pass(&c)
        };
        assert!(ctx(&inv));
        // One GPU: no collective to speak of, no second pass.
        let mut one = inv.clone();
        one.gpus.truncate(1);
        assert!(!ctx(&one));
        one.gpus = inv.gpus[..2].to_vec();
        assert!(ctx(&one));
        let c = Ctx {
            suite: &ev.suite.resolved,
            inventory: &inv,
            earlier: &[],
            simulated: true,
        };
        assert!(check(None, CollectiveOp::AllReduce).second_pass(&c));
        assert!(!check(None, CollectiveOp::AllGather).second_pass(&c));
        // Unknown: only a suite that judges the figure without NVLS asks for the second pass.
        for g in &mut inv.gpus {
            g.nvls = Default::default();
        }
        assert!(ctx(&inv));
        let c = Ctx {
            suite: &ev.suite.resolved,
            inventory: &inv,
            earlier: &[],
            simulated: true,
        };
        assert!(!check(None, CollectiveOp::AllReduce).second_pass(&c));
        let mut m = Measured::default();
        m.facts.push(Fact {
            name: "ranks".into(),
            subject: Subject::node(),
            value: FactValue::Count(8),
        });
        m.facts.push(Fact {
            name: "wrong_elements".into(),
            subject: Subject::size(1 << 30),
            value: FactValue::Elements {
                wrong: 0,
                checked: 256,
            },
        });
        m.metrics.push(Metric::new(
            "busbw",
            Subject::size(1 << 30),
            "GB/s",
            vec![480.0],
        ));
        let f = check(Some(NvlsRequirement::Off), CollectiveOp::AllReduce).evaluate(&c, &m);
        let last = f.last().unwrap();
        assert_eq!(last.status, Status::Error, "{f:#?}");
        assert!(last.reason.contains("none was measured"), "{f:#?}");
    }

    /// A measured all_reduce: `ranks`, and per size (bytes, busbw), its data intact; with
    /// `off`, the same sizes measured with NVLS forced off at `off` x the figure.
    fn swept(ranks: u64, sizes: &[(u64, f64)], off: Option<f64>) -> Measured {
        let mut m = Measured::default();
        m.facts
            .push(Fact::new("ranks", Subject::node(), FactValue::Count(ranks)));
        for &(s, bw) in sizes {
            let ok = FactValue::Elements {
                wrong: 0,
                checked: 64,
            };
            m.facts
                .push(Fact::new("wrong_elements", Subject::size(s), ok.clone()));
            m.metrics
                .push(Metric::new("busbw", Subject::size(s), "GB/s", vec![bw]));
            if let Some(f) = off {
                m.facts
                    .push(Fact::new("wrong_elements_no_nvls", Subject::size(s), ok));
                m.metrics.push(Metric::new(
                    "busbw_no_nvls",
                    Subject::size(s),
                    "GB/s",
                    vec![bw * f],
                ));
            }
        }
        m
    }

    /// Every finding of all_reduce on the simulated H100 (NVLS available, its own run's peer
    /// figures before it) with `cfg` (a suite's all_reduce section) for `m`.
    fn evaluated(cfg: &str, m: &Measured) -> Vec<Finding> {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let ctx = Ctx {
            suite: &ev.suite.resolved,
            inventory: &ev.node,
            earlier: &ev.checks,
            simulated: true,
        };
        Collective {
            op: CollectiveOp::AllReduce,
            cfg: toml::from_str(cfg).unwrap(),
        }
        .evaluate(&ctx, m)
    }

    /// The bus bandwidth judgements of all_reduce on the simulated H100 (NVLS available) with
    /// `cfg` (a suite's all_reduce section), as (subject, metric, status) of each non-data,
    /// non-information finding.
    fn floors_judged(cfg: &str, m: &Measured) -> Vec<(Subject, String, Status)> {
        evaluated(cfg, m)
            .into_iter()
            .filter(|f| !f.info && f.expected != "0 wrong elements")
            .map(|f| (f.subject, f.metric.unwrap_or_default(), f.status))
            .collect()
    }

    /// How each figure counts, as nccl-tests counts it: algbw over the message once, busbw
    /// with the bus factor, in both passes; other figures have no counting convention.
    #[test]
    fn each_bandwidth_figure_counts_as_nccl_tests_does() {
        use crate::evidence::{Bytes, Convention, Directions, Tool};
        let c = |b| Some(Convention::new(Directions::OneWay, b, Tool::NcclTests));
        assert_eq!(convention("algbw"), c(Bytes::Once));
        assert_eq!(convention("algbw_no_nvls"), c(Bytes::Once));
        assert_eq!(convention("busbw"), c(Bytes::BusFactor));
        assert_eq!(convention("busbw_no_nvls"), c(Bytes::BusFactor));
        assert_eq!(convention("time"), None);
    }

    /// The rank count NCCL reports is what is judged, not the node's GPU count: an all_reduce
    /// that ran over one rank on an 8-GPU node moved nothing between GPUs.
    #[test]
    fn the_rank_count_measured_decides_not_the_gpus_listed() {
        let mut m = Measured::default();
        m.facts
            .push(Fact::new("ranks", Subject::node(), FactValue::Count(1)));
        let f = evaluated("", &m);
        assert!(
            f.iter()
                .any(|x| x.status == Status::Skip && x.found == "1 rank"),
            "{f:?}"
        );
        assert!(
            f.iter().filter(|x| x.found == "1 rank").all(|x| x.info),
            "{f:?}"
        );
        // Floors stated and not judged on one rank: a promise not kept (partial), said so.
        for cfg in [
            r#"min_busbw_gbps = { "1GiB" = 400.0 }"#,
            r#"warn_busbw_gbps = { "1GiB" = 400.0 }"#,
        ] {
            let f = evaluated(cfg, &m);
            let one = f.iter().find(|x| x.found == "1 rank").expect("one rank");
            assert!(!one.info, "{cfg}: {f:?}");
            assert_eq!(one.status, Status::Skip);
            assert_eq!(
                one.reason,
                "not available here: all_reduce on one rank, whose bus bandwidth is 0 by \
                 definition: the suite's 1 bus bandwidth floor was not judged"
            );
        }
        let f = evaluated(
            r#"min_busbw_gbps = { "1MiB" = 1.0, "1GiB" = 400.0 }
warn_busbw_gbps = { "1GiB" = 450.0 }"#,
            &m,
        );
        assert!(
            f.iter()
                .any(|x| x.reason.ends_with("3 bus bandwidth floors were not judged")),
            "{f:?}"
        );
        // A floor of 0 judges nothing on any node: not one the single rank leaves unjudged.
        let f = evaluated(r#"min_busbw_gbps = { "1MiB" = 0.0 }"#, &m);
        let one: Vec<_> = f.iter().filter(|x| x.found == "1 rank").collect();
        assert_eq!(one.len(), 1, "{f:?}");
        assert!(one[0].info, "{f:?}");
        let f = evaluated(r#"min_busbw_gbps = { "1MiB" = 0.0, "1GiB" = 400.0 }"#, &m);
        assert!(
            f.iter()
                .any(|x| !x.info && x.reason.ends_with("1 bus bandwidth floor was not judged")),
            "{f:?}"
        );
        m.facts[0].value = FactValue::Count(8);
        assert!(!evaluated("", &m).iter().any(|x| x.found == "1 rank"));
    }

    #[test]
    fn each_size_is_held_to_its_floor_and_warning_level() {
        let cfg = r#"min_busbw_gbps = { "1MiB" = 100.0, "1GiB" = 400.0 }
                     warn_busbw_gbps = { "1GiB" = 450.0 }"#;
        let at = |s| Subject::op_size(CollectiveOp::AllReduce, s);
        // Under 1 MiB no floor applies; 1 MiB is held to 100, 1 GiB and up to 400 and 450.
        let m = swept(
            8,
            &[
                (1 << 10, 1.0),
                (1 << 20, 99.0),
                (1 << 30, 449.0),
                (2 << 30, 451.0),
                (4 << 30, 399.0),
            ],
            None,
        );
        let j = floors_judged(cfg, &m);
        assert_eq!(
            j,
            vec![
                (at(1 << 20), "busbw".into(), Status::Fail),
                (at(1 << 30), "busbw".into(), Status::Warn),
                (at(2 << 30), "busbw".into(), Status::Pass),
                (at(4 << 30), "busbw".into(), Status::Fail),
            ]
        );
        // Two ranks are judged too; one rank (or none) has no bus bandwidth to judge: its
        // floors are one judgement not made (a skip that makes the run partial), none judged.
        let two = floors_judged(cfg, &swept(2, &[(1 << 30, 500.0)], None));
        assert_eq!(two, vec![(at(1 << 30), "busbw".into(), Status::Pass)]);
        for ranks in [0, 1] {
            let one = floors_judged(cfg, &swept(ranks, &[(1 << 30, 1.0)], None));
            assert_eq!(
                one.iter().map(|x| x.2).collect::<Vec<_>>(),
                vec![Status::Skip],
                "{ranks} ranks: {one:?}"
            );
        }
        // With NVLS forced off measured beside it, NCCL's figure is still the one judged...
        let both = floors_judged(cfg, &swept(8, &[(1 << 30, 500.0)], Some(0.5)));
        assert_eq!(both, vec![(at(1 << 30), "busbw".into(), Status::Pass)]);
        // ...unless the suite says nvls = "off": then the figure without NVLS is.
        let off = format!("nvls = \"off\"\n{cfg}");
        let judged_off = floors_judged(&off, &swept(8, &[(1 << 30, 500.0)], Some(0.5)));
        assert_eq!(
            judged_off,
            vec![(at(1 << 30), "busbw_no_nvls".into(), Status::Fail)]
        );
        // The words say which figure was judged, and what NVLS buys is stated only beside
        // NCCL's own figure.
        let buys = |f: &[Finding]| {
            f.iter()
                .filter(|x| x.info && x.reason.contains("NVLS adds"))
                .count()
        };
        let normal = evaluated(cfg, &swept(8, &[(1 << 30, 500.0)], Some(0.5)));
        assert_eq!(buys(&normal), 1, "{normal:#?}");
        assert!(normal
            .iter()
            .any(|x| x.reason.contains("bus bandwidth 500 GB/s within limits")));
        let forced = evaluated(&off, &swept(8, &[(1 << 30, 500.0)], Some(0.5)));
        assert_eq!(buys(&forced), 0, "{forced:#?}");
        assert!(forced.iter().any(|x| x
            .reason
            .contains("bus bandwidth with NVLS forced off 250 GB/s is below the floor")));
        // A pass with NVLS forced off is seen from its data checks alone, and judged for them.
        let mut only_facts = swept(8, &[(1 << 30, 500.0)], None);
        only_facts.facts.push(Fact::new(
            "wrong_elements_no_nvls",
            Subject::size(1 << 30),
            FactValue::Elements {
                wrong: 3,
                checked: 64,
            },
        ));
        let f = evaluated(cfg, &only_facts);
        assert!(
            f.iter()
                .any(|x| x.status == Status::Fail && x.reason.contains("with NVLS forced off")),
            "{f:#?}"
        );
    }

    /// A figure measured while the environment steers NCCL (`NCCL_P2P_DISABLE=1`) that falls
    /// short is not the node's failure: an error naming the setting. What held still holds, and
    /// wrong data still fails.
    #[test]
    fn a_shortfall_under_an_nccl_setting_is_not_judged_but_wrong_data_fails() {
        let cfg = r#"min_busbw_gbps = { "1MiB" = 100.0 }
                     min_fraction_of_p2p = 1.0"#;
        let mut m = swept(8, &[(1 << 20, 99.0), (1 << 30, 150.0)], None);
        let mut set = Measured::default();
        crate::checks::nccl_env::record(
            &mut set,
            &[crate::backend::NcclSetting::env("NCCL_P2P_DISABLE", "1")],
            crate::checks::nccl_env::Scope::Node,
            &Default::default(),
        );
        // Without the setting: 1 MiB below its floor, 1 GiB above it but below the slowest
        // peer read.
        let plain: Vec<Status> = floors_judged(cfg, &m).iter().map(|x| x.2).collect();
        assert_eq!(plain, [Status::Fail, Status::Pass, Status::Fail]);
        m.facts.extend(set.facts);
        let f = evaluated(cfg, &m);
        let judged: Vec<&Finding> = f.iter().filter(|x| !x.info).collect();
        assert_eq!(
            judged.iter().map(|x| x.status).collect::<Vec<_>>(),
            [Status::Pass, Status::Error, Status::Pass, Status::Error],
            "{judged:#?}"
        );
        for x in [judged[1], judged[3]] {
            assert!(
                x.reason
                    .contains("not judged: NCCL ran under NCCL_P2P_DISABLE=1"),
                "{}",
                x.reason
            );
        }
        assert!(!judged[2].reason.contains("not judged"));
        let note: Vec<&Finding> = f
            .iter()
            .filter(|x| x.metric.as_deref() == Some("nccl_env"))
            .collect();
        assert_eq!(note.len(), 1);
        assert!(note[0].info);
        // Wrong data is the node's, whatever steered NCCL.
        m.facts[1].value = FactValue::Elements {
            wrong: 1,
            checked: 64,
        };
        let f = evaluated(cfg, &m);
        assert_eq!(f[0].status, Status::Fail, "{:#?}", f[0]);
        assert!(!f[0].reason.contains("not judged"));
    }

    /// End to end on the simulated H100 with a slow pair: its all_reduce fails; in the same run
    /// with `NCCL_ALGO=Ring` in NCCL's environment the collective cannot say whose the
    /// shortfall is and is an error naming the setting (the run ends untestable, exit 3), while
    /// the peer copies, which NCCL does not steer, still fail on the pair.
    #[test]
    fn a_run_under_an_nccl_setting_does_not_fail_the_collective_for_it() {
        use crate::evidence::Verdict;
        let fault = ["slow-gpu-pair:gpu=1,peer=4"];
        let plain = crate::testutil::simulated("h100-sxm-8", &fault);
        let ar = plain.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Fail);
        assert_eq!(plain.verdict, Verdict::Fail);
        let set = [("NCCL_ALGO", "Ring"), ("NCCL_DEBUG", "INFO")];
        let under = crate::testutil::simulated_under("h100-sxm-8", &fault, &set);
        let ar = under.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Error, "{:#?}", ar.findings);
        assert!(ar
            .facts
            .iter()
            .any(|f| f.name == "nccl_env" && f.value == FactValue::Text("NCCL_ALGO=Ring".into())));
        assert!(!ar
            .facts
            .iter()
            .any(|f| matches!(&f.value, FactValue::Text(t) if t.starts_with("NCCL_DEBUG"))));
        assert!(ar.findings.iter().any(|f| f.status == Status::Error
            && f.reason
                .contains("not judged: NCCL ran under NCCL_ALGO=Ring")));
        // The peer copies still name the pair; the run as a whole could not be tested as asked.
        assert_eq!(under.check("p2p_bandwidth").unwrap().status, Status::Fail);
        assert_eq!(under.verdict, Verdict::Error);
        assert_eq!(
            under.verdict.exit_code(),
            crate::error::exit::NODE_UNTESTABLE
        );
        // Without the fault the same setting passes: what holds under it holds.
        let healthy = crate::testutil::simulated_under("h100-sxm-8", &[], &set);
        let ar = healthy.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Pass);
        assert_eq!(healthy.verdict, Verdict::Pass);
    }

    /// A setting the suite accepts (`[nccl] accept`) is part of the node as certified: the
    /// collective measured under it is judged, and fails where the node falls short; another
    /// value of the same setting is still not the node's.
    #[test]
    fn a_setting_the_suite_accepts_is_judged_as_the_nodes() {
        use crate::evidence::Verdict;
        let suite = |value: &str| {
            crate::suite::load::load_source(crate::config::Source {
                name: "site.toml".into(),
                text: format!(
                    "format_version = 1\nname = \"site\"\nextends = \"h100-sxm-8\"\n\
                     [nccl]\naccept = {{ NCCL_TOPO_FILE = \"{value}\" }}\n"
                ),
            })
            .expect("a suite that accepts a setting")
        };
        let fault = ["slow-gpu-pair:gpu=1,peer=4"];
        let set = [("NCCL_TOPO_FILE", "/opt/topo.xml")];
        let ev =
            crate::testutil::simulated_with(&suite("/opt/topo.xml"), "h100-sxm-8", &fault, &set);
        let ar = ev.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Fail, "{:#?}", ar.findings);
        assert_eq!(ev.verdict, Verdict::Fail);
        assert!(ar
            .facts
            .iter()
            .any(|f| f.name == crate::checks::nccl_env::ACCEPTED
                && f.value == FactValue::Text("NCCL_TOPO_FILE=/opt/topo.xml".into())));
        assert!(!ar
            .facts
            .iter()
            .any(|f| f.name == crate::checks::nccl_env::FACT));
        assert!(ar.findings.iter().any(|f| f.info
            && f.reason
                .contains("with NCCL_TOPO_FILE=/opt/topo.xml, which the suite accepts")));
        // Healthy under it: a pass, not a partial one.
        let ev = crate::testutil::simulated_with(&suite("/opt/topo.xml"), "h100-sxm-8", &[], &set);
        assert_eq!(ev.verdict, Verdict::Pass);
        // The suite accepts another file: this one steers NCCL, and the shortfall is not judged.
        let ev =
            crate::testutil::simulated_with(&suite("/opt/other.xml"), "h100-sxm-8", &fault, &set);
        let ar = ev.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Error, "{:#?}", ar.findings);
    }

    #[test]
    fn the_relative_floor_compares_with_the_slowest_peer_read_of_this_run() {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let slowest = ev
            .check("p2p_bandwidth")
            .unwrap()
            .metrics
            .iter()
            .filter(|x| x.name == "p2p_read")
            .map(|x| x.median)
            .fold(f64::INFINITY, f64::min);
        let cfg = "min_fraction_of_p2p = 1.0";
        let at = Subject::op_size(CollectiveOp::AllReduce, 1 << 30);
        let judged =
            |bw: f64| floors_judged(cfg, &swept(8, &[(1 << 20, 1.0), (1 << 30, bw)], None));
        // Judged at the largest size only.
        assert_eq!(
            judged(slowest + 1.0),
            vec![(at.clone(), String::new(), Status::Pass)]
        );
        assert_eq!(
            judged(slowest - 1.0),
            vec![(at, String::new(), Status::Fail)]
        );
    }

    /// GPUs that admit one process at a time refuse the child that forces NVLS off while this
    /// process holds them: the pass is not run (the child is never started), the check says
    /// why, and NCCL's own figure is still judged.
    #[test]
    fn gpus_in_exclusive_process_mode_leave_the_pass_without_nvls_out_and_say_why() {
        let ev = crate::testutil::simulated("h100-sxm-8", &["exclusive-process:gpu=3"]);
        let c = ev.check("collective.all_reduce").unwrap();
        assert_eq!(c.status, Status::Pass, "{:#?}", c.findings);
        assert!(
            c.metrics.iter().all(|x| !x.name.ends_with(NO_NVLS)),
            "no figure without NVLS was measured"
        );
        let why = "GPU 3 is in compute mode Exclusive_Process";
        let f: Vec<&Finding> = c
            .findings
            .iter()
            .filter(|f| f.reason.contains(why))
            .collect();
        assert_eq!(f.len(), 1, "{:#?}", c.findings);
        assert_eq!((f[0].status, f[0].info), (Status::Skip, true));
        assert_eq!(
            f[0].reason,
            "all_reduce with NVLS forced off: not available here (that sweep runs in a second \
             process, which the GPUs refuse while nodecert holds them: GPU 3 is in compute mode \
             Exclusive_Process); NCCL's own figure is judged"
        );
        assert!(c.plan.iter().any(|p| p.contains(why)), "{:?}", c.plan);
        // NCCL's own figure is still judged at every size with a floor.
        assert!(c
            .findings
            .iter()
            .any(|f| !f.info && f.metric.as_deref() == Some("busbw")));
        // Every GPU of the default mode: the pass runs.
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let c = ev.check("collective.all_reduce").unwrap();
        assert!(c.metrics.iter().any(|x| x.name == "busbw_no_nvls"));
        assert!(c.facts.iter().all(|f| f.name != NO_NVLS_BLOCKED));
    }

    /// A suite that judges the figure without NVLS cannot be judged on such a node: an error
    /// that names the compute mode, not a pass on NCCL's own (NVLS) figure.
    #[test]
    fn a_suite_judging_without_nvls_on_exclusive_gpus_is_an_error_naming_the_mode() {
        let m = {
            let mut m = swept(8, &[(1 << 30, 480.0)], None);
            m.facts.push(Fact::new(
                NO_NVLS_BLOCKED,
                Subject::node(),
                FactValue::Text("GPUs 0, 1 are in compute mode Exclusive_Process".into()),
            ));
            m
        };
        let f = evaluated("nvls = \"off\"\nmin_busbw_gbps = { \"1G\" = 400 }", &m);
        let last = f.last().unwrap();
        assert_eq!(last.status, Status::Error, "{f:#?}");
        assert_eq!(
            last.reason,
            "all_reduce: the suite judges the figure without NVLS, but it cannot be measured \
             here: that sweep runs in a second process, which the GPUs refuse while nodecert \
             holds them: GPUs 0, 1 are in compute mode Exclusive_Process"
        );
        // And no "not available here" note beside it: the error says it.
        assert_eq!(
            f.iter().filter(|f| f.reason.contains("Exclusive")).count(),
            1
        );
    }

    #[test]
    fn what_nvls_buys_is_stated_at_the_largest_size() {
        let mut m = Measured::default();
        for (size, on, off) in [(1u64 << 30, 400.0, 300.0), (8 << 30, 480.0, 368.0)] {
            m.metrics
                .push(Metric::new("busbw", Subject::size(size), "GB/s", vec![on]));
            m.metrics.push(Metric::new(
                "busbw_no_nvls",
                Subject::size(size),
                "GB/s",
                vec![off],
            ));
        }
        let f = what_nvls_buys(CollectiveOp::AllReduce, &m).expect("stated");
        assert!(f.info && !f.is_judgement());
        assert_eq!(f.metric.as_deref(), Some("busbw_no_nvls"));
        assert_eq!(
            f.reason,
            "all_reduce at 8 GiB: bus bandwidth 368 GB/s with NVLS forced off, 480 GB/s as \
             NCCL chose (NVLS adds 30.4%)"
        );
        // A figure of 0 without NVLS: no percentage made up from it.
        for x in m.metrics.iter_mut().filter(|x| x.name == "busbw_no_nvls") {
            x.median = 0.0;
        }
        let f = what_nvls_buys(CollectiveOp::AllReduce, &m).expect("stated");
        assert!(f.reason.ends_with("480 GB/s as NCCL chose"), "{}", f.reason);
        // Nothing measured without NVLS: nothing to say.
        m.metrics.retain(|x| x.name == "busbw");
        assert!(what_nvls_buys(CollectiveOp::AllReduce, &m).is_none());
    }

    #[test]
    fn nothing_checked_is_an_error_not_correct_data() {
        assert_eq!(statuses(&["0/0"]), vec![Status::Error]);
        assert_eq!(statuses(&[]), vec![Status::Error]);
    }
}
