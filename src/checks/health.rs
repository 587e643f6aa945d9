//! Health: ECC mode and error counts, row remapping, retired pages, XIDs, PCIe replays, NVLink
//! error counters, throttling, temperature, driver version. Limits from Azure's and DCGM's rules
//! (shared/notes/reference-numbers.md).

use super::judge::finding;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Status};
use crate::inventory::XidEvent;
use crate::suite::{version_at_least, HealthCheck};

pub struct Health(pub HealthCheck);

/// XIDs to judge (seen while nodecert ran, logged within `lookback_h` hours before it, or of
/// unknown age) and XIDs that are history (logged earlier: perhaps before a GPU reset).
fn split_xids(xids: &[XidEvent], lookback_h: f64) -> (Vec<&XidEvent>, Vec<&XidEvent>) {
    let window_s = lookback_h * 3600.0;
    xids.iter()
        .partition(|x| x.age_s.is_none_or(|a| a <= window_s))
}

/// "3.2 h", "12.0 d", "40 s".
fn fmt_age(s: f64) -> String {
    if s >= 2.0 * 86400.0 {
        format!("{:.1} d", s / 86400.0)
    } else if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{s:.0} s")
    }
}

fn na(out: &mut Vec<Finding>, who: &str, what: &str) {
    out.push(finding(
        Status::Skip,
        who,
        "not available here",
        "-",
        format!("{who} {what}: not available here"),
    ));
}

impl Check for Health {
    fn id(&self) -> String {
        "health".into()
    }
    fn kind(&self) -> &'static str {
        "health"
    }
    fn title(&self) -> String {
        "Node health".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        if ctx.inventory.gpus.is_empty() && ctx.inventory.lost_gpus.is_empty() {
            return Err("no GPUs to check".into());
        }
        Ok(vec![format!(
            "ECC, remapped rows, XIDs, PCIe replays, NVLink errors, throttling on {} GPUs",
            ctx.inventory.gpus.len()
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
        let h = &self.0;
        let inv = ctx.inventory;
        let mut out = Vec::new();
        let driver_min = h.driver_min.as_ref().or(ctx.suite.node.driver_min.as_ref());
        if let Some(min) = driver_min {
            match &inv.driver_version {
                Some(v) => {
                    let ok = version_at_least(v, min).unwrap_or(false);
                    out.push(finding(
                        if ok { Status::Pass } else { Status::Fail },
                        "node",
                        format!("driver {v}"),
                        format!(">= {min}"),
                        if ok {
                            format!("driver {v}")
                        } else {
                            format!("driver {v} is older than the required {min}")
                        },
                    ));
                }
                None => na(&mut out, "node", "driver version"),
            }
        }
        // A GPU that stopped answering the driver fails the node, whatever else was read.
        for l in &inv.lost_gpus {
            let who = l.label();
            out.push(finding(
                Status::Fail,
                &who,
                format!("lost ({} failed)", l.detail),
                "answering the driver",
                format!(
                    "{who} fell off the bus: the driver lists it but it no longer answers \
                     ({} failed); it needs a GPU reset or a repair",
                    l.detail
                ),
            ));
        }
        for g in &inv.gpus {
            let who = format!("GPU {}", g.index);
            let mut bad = |st: Status, found: String, expected: String, reason: String| {
                out.push(finding(st, &who, found, expected, reason))
            };
            match g.ecc_enabled {
                Some(true) => {}
                Some(false) if h.require_ecc => bad(
                    Status::Fail,
                    "ECC off".into(),
                    "ECC on".into(),
                    format!("{who}: ECC is disabled"),
                ),
                Some(false) => {}
                None if h.require_ecc => bad(
                    Status::Skip,
                    "not available here".into(),
                    "ECC on".into(),
                    format!("{who} ECC mode: not available here"),
                ),
                None => {}
            }
            let e = &g.ecc;
            let unc = [e.volatile_uncorrected, e.sram_uncorrected]
                .into_iter()
                .flatten()
                .max();
            match unc {
                Some(u) if u > h.max_uncorrectable => bad(
                    Status::Fail,
                    format!("{u} uncorrectable"),
                    format!("<= {}", h.max_uncorrectable),
                    format!("{who}: {u} uncorrectable ECC error(s)"),
                ),
                Some(_) => {}
                None => bad(
                    Status::Skip,
                    "not available here".into(),
                    "-".into(),
                    format!("{who} ECC error counts: not available here"),
                ),
            }
            if let Some(c) = e.sram_corrected.filter(|c| *c > h.max_sram_correctable) {
                bad(
                    Status::Fail,
                    format!("{c} SRAM corrected"),
                    format!("<= {}", h.max_sram_correctable),
                    format!("{who}: {c} correctable SRAM errors"),
                );
            }
            if let Some(c) = e.dram_errors.filter(|c| *c > h.max_dram_errors) {
                bad(
                    Status::Fail,
                    format!("{c} DRAM errors"),
                    format!("<= {}", h.max_dram_errors),
                    format!("{who}: {c} DRAM errors"),
                );
            }
            match &g.remapped_rows {
                Some(r) => {
                    if r.pending && h.fail_on_remap_pending {
                        bad(
                            Status::Fail,
                            "remap pending".into(),
                            "no pending remap".into(),
                            format!(
                                "{who}: a row remap is pending: the GPU must be reset before use"
                            ),
                        );
                    }
                    if r.failure && h.fail_on_remap_failure {
                        bad(
                            Status::Fail,
                            "remap failed".into(),
                            "no failed remap".into(),
                            format!("{who}: a row remap failed: the GPU is out of spare rows"),
                        );
                    }
                }
                None => {
                    if g.retired_pages.is_none() {
                        bad(
                            Status::Skip,
                            "not available here".into(),
                            "-".into(),
                            format!("{who} remapped rows and retired pages: not available here"),
                        );
                    }
                }
            }
            if let Some(p) = &g.retired_pages {
                if p.pending {
                    bad(
                        Status::Warn,
                        "page retirement pending".into(),
                        "none pending".into(),
                        format!("{who}: a page retirement is pending (reset needed)"),
                    );
                }
            }
            let (recent, history) = split_xids(&g.xids, h.xid_lookback_h);
            for x in recent {
                let fatal = h.fail_xids.contains(&x.code);
                bad(
                    if fatal { Status::Fail } else { Status::Warn },
                    format!("XID {}", x.code),
                    "no XID".into(),
                    format!(
                        "{who}: XID {} ({}{}){}",
                        x.code,
                        x.source,
                        x.age_s
                            .filter(|a| *a > 0.0)
                            .map(|a| format!(", {} before the run", fmt_age(a)))
                            .unwrap_or_default(),
                        if fatal { ", which fails a node" } else { "" }
                    ),
                );
            }
            if !history.is_empty() {
                let list: Vec<String> = history
                    .iter()
                    .map(|x| {
                        format!(
                            "XID {} ({}, {} ago)",
                            x.code,
                            x.source,
                            fmt_age(x.age_s.unwrap_or(0.0))
                        )
                    })
                    .collect();
                bad(
                    Status::Warn,
                    format!("{} older XID(s)", history.len()),
                    format!("judged: XIDs of the last {} h", h.xid_lookback_h),
                    format!(
                        "{who}: history, not judged: {} logged before the {} h look-back",
                        list.join(", "),
                        h.xid_lookback_h
                    ),
                );
            }
            if let Some(r) = g.pcie.replay_counter.filter(|r| *r > h.max_pcie_replays) {
                bad(
                    Status::Fail,
                    format!("{r} replays"),
                    format!("<= {}", h.max_pcie_replays),
                    format!("{who}: {r} PCIe replays (limit {})", h.max_pcie_replays),
                );
            }
            for l in &g.nvlinks {
                let errs: u64 = [
                    l.errors.replay,
                    l.errors.recovery,
                    l.errors.crc_flit,
                    l.errors.crc_data,
                ]
                .into_iter()
                .flatten()
                .sum();
                if errs > h.max_nvlink_errors {
                    bad(
                        Status::Fail,
                        format!("{errs} errors"),
                        format!("<= {}", h.max_nvlink_errors),
                        format!(
                            "{who} link {}: {errs} NVLink errors (replay, recovery, CRC)",
                            l.link
                        ),
                    );
                }
            }
            for t in &g.throttle_reasons {
                if h.fail_throttle.contains(t) {
                    bad(
                        Status::Fail,
                        t.clone(),
                        "not throttled".into(),
                        format!("{who}: clocks held back by {t}"),
                    );
                }
            }
            if let (Some(t), Some(w)) = (g.temperature_c, h.warn_temperature_c) {
                if t > w {
                    bad(
                        Status::Warn,
                        format!("{t:.0} °C"),
                        format!("<= {w:.0} °C"),
                        format!("{who}: {t:.0} °C at rest"),
                    );
                }
            }
        }
        let problems = out
            .iter()
            .filter(|f| f.status != Status::Pass && f.status != Status::Skip)
            .count();
        if problems == 0 {
            out.push(finding(
                Status::Pass,
                "node",
                format!("{} GPUs healthy", inv.gpus.len()),
                "no errors beyond limits",
                format!("{} GPUs: ECC, remapped rows, XIDs, replays, NVLink errors and throttling within limits", inv.gpus.len()),
            ));
        }
        out
    }
}
