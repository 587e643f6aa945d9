//! Health: ECC mode and error counts, row remapping, retired pages, XIDs, PCIe replays, NVLink
//! error counters, throttling, temperature, driver version, and other processes on the GPUs. Limits from Azure's and DCGM's rules
//! (shared/notes/reference-numbers.md).
//!
//! Every reading is a finding of its own, per GPU: within limits (a pass), beyond them (a
//! warning or failure), or "not available here" (a skip) when the platform did not give it, as
//! VMs often do not. Nothing unknown is counted as healthy: an unread counter is not 0, unread
//! throttle reasons are not "not throttled", and a check that missed a reading is a partial one.

use super::judge::{finding, not_available as na};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Status, Subject};
use crate::inventory::{Gpu, GpuProcess, Inventory, Reading, XidEvent};
use crate::suite::{version_at_least, HealthCheck, OtherProcesses};

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

/// A reading within its limit.
fn ok(sub: &Subject, r: Reading, found: impl Into<String>, expected: impl Into<String>) -> Finding {
    let found = found.into();
    let who = sub.describe();
    finding(
        Status::Pass,
        sub.clone(),
        found.clone(),
        expected,
        format!("{who} {}: {found}", r.describe()),
    )
    .on(r.key())
}

fn bad(
    st: Status,
    who: &Subject,
    r: Reading,
    found: impl Into<String>,
    expected: impl Into<String>,
    reason: String,
) -> Finding {
    finding(st, who.clone(), found, expected, reason).on(r.key())
}

impl Check for Health {
    fn runs_on_gpus(&self) -> bool {
        false
    }
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
            "other processes, ECC, remapped rows, XIDs, PCIe replays, NVLink errors, throttling on {} GPUs",
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

    fn samples(&self, _gpus: usize) -> (u64, String) {
        // Reads the inventory (or earlier records): no samples of its own.
        (0, String::new())
    }

    fn evaluate(&self, ctx: &Ctx, _: &Measured) -> Vec<Finding> {
        let h = &self.0;
        let inv = ctx.inventory;
        let mut out = Vec::new();
        let driver_min = h.driver_min.as_ref().or(ctx.suite.node.driver_min.as_ref());
        if let Some(min) = driver_min {
            let r = Reading::DriverVersion;
            match &inv.driver_version {
                // A version that does not read as numbers is unknown, not old.
                Some(v) if version_at_least(v, min).is_none() => out.push(
                    finding(
                        Status::Skip,
                        Subject::node(),
                        format!("driver {v}"),
                        format!(">= {min}"),
                        format!(
                            "not available here: the driver's version {} does not read as \
                             numbers like 550.54.15, so it cannot be held to {min}",
                            crate::console::visible(&format!("{v:?}"))
                        ),
                    )
                    .on(r.key()),
                ),
                Some(v) => {
                    let good = version_at_least(v, min).unwrap_or(false);
                    out.push(if good {
                        let mut f = ok(
                            &Subject::node(),
                            r,
                            format!("driver {v}"),
                            format!(">= {min}"),
                        );
                        f.reason = format!("driver {v}");
                        f
                    } else {
                        bad(
                            Status::Fail,
                            &Subject::node(),
                            r,
                            format!("driver {v}"),
                            format!(">= {min}"),
                            format!("driver {v} is older than the required {min}"),
                        )
                    });
                }
                None => out.push(na(&Subject::node(), r, format!(">= {min}"))),
            }
        }
        // A GPU that stopped answering the driver fails the node, whatever else was read.
        for l in &inv.lost_gpus {
            let who = l.label();
            out.push(finding(
                Status::Fail,
                l.subject(),
                format!("lost ({} failed)", l.detail),
                "answering the driver",
                format!(
                    "{who} fell off the bus: the driver lists it but it no longer answers \
                     ({} failed); it needs a GPU reset or a repair",
                    l.detail
                ),
            ));
        }
        let mode = h.other_processes.unwrap_or_default();
        out.extend(mps_finding(inv, mode));
        for g in &inv.gpus {
            out.extend(gpu_findings(h, g, mode));
        }
        if h.vbios_must_match {
            out.extend(vbios_findings(&inv.gpus));
        }
        out
    }
}

/// One VBIOS across the node: a GPU whose version was not read is "not available here", and the
/// versions that were read must all be one. A node with one GPU has nothing to compare, so no
/// judgement is made (and none is counted).
fn vbios_findings(gpus: &[Gpu]) -> Vec<Finding> {
    let r = Reading::Vbios;
    if gpus.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    // Version -> the GPUs that run it, in the order first seen.
    let mut read = Vec::new();
    for g in gpus {
        match g.vbios.as_deref().map(str::trim).filter(|_| g.gives(r)) {
            Some(v) => read.push((v, g.index)),
            None => out.push(na(&Subject::gpu(g.index), r, "the node's one VBIOS")),
        }
    }
    let versions = crate::inventory::group_in_order(read);
    let read: usize = versions.iter().map(|(_, ids)| ids.len()).sum();
    match versions.len() {
        0 => {}
        1 if read < 2 => {}
        1 => out.push(ok(
            &Subject::node(),
            r,
            format!("{} on {read} GPUs", versions[0].0),
            "one VBIOS on every GPU",
        )),
        _ => {
            let list = versions
                .iter()
                .map(|(v, ids)| format!("{v} on {}", super::judge::gpu_list(ids)))
                .collect::<Vec<_>>()
                .join("; ");
            out.push(bad(
                Status::Fail,
                &Subject::node(),
                r,
                list.clone(),
                "one VBIOS on every GPU",
                format!(
                    "the GPUs run {} VBIOS versions ({list}): flash them to one version",
                    versions.len()
                ),
            ));
        }
    }
    out
}

/// Device memory in use on a GPU that no listed process explains, from which another process
/// is presumed (one the list cannot show: in another PID namespace, as seen from a container).
/// A CUDA context alone holds about 500 MiB; an idle GPU shows none (the lent H200: 0 MiB used
/// beside 616 MiB reserved).
pub const UNLISTED_MEMORY_LIMIT: u64 = 1 << 30;

/// Whether another process holds the GPU. That is no defect of the GPU, but nothing measured
/// beside it describes the GPU: an error (untestable), not a failure. With
/// `other_processes = "shown"`, a process found is information and nothing else is said.
fn processes_finding(sub: &Subject, g: &Gpu, mode: OtherProcesses) -> Option<Finding> {
    let r = Reading::Processes;
    let who = sub.describe();
    let expected = "no other process";
    let listed = g.processes.as_deref().filter(|_| g.gives(r));
    // Where none is listed (or the list is unread), memory in use still shows one.
    let unlisted = g.memory_used_bytes.filter(|&b| b >= UNLISTED_MEMORY_LIMIT);
    // What was found, what it is, and what to do about it.
    let (found, what, then) = match (listed, unlisted) {
        (Some(list), _) if !list.is_empty() => {
            let each: Vec<String> = list.iter().map(GpuProcess::describe).collect();
            let mps = list.iter().any(GpuProcess::is_mps_server);
            let (found, it) = match list.len() {
                1 => ("1 other process".to_string(), "it"),
                n => (format!("{n} other processes"), "them"),
            };
            let then = if mps {
                "an MPS server holds it, so every process shares the GPU through it; stop MPS \
                 (`echo quit | nvidia-cuda-mps-control`) and run again"
                    .to_string()
            } else {
                format!(
                    "stop {it} and run again (`nvidia-smi --query-compute-apps=pid,\
                     process_name,used_memory --format=csv` lists them)"
                )
            };
            (
                found,
                format!("{who} is in use by {}", each.join(", ")),
                then,
            )
        }
        (_, Some(b)) => {
            let b = crate::units::format_bytes(b);
            (
                format!("{b} in use, no process listed"),
                format!(
                    "{who} has {b} of memory in use that no process NVML lists explains (a \
                     process in another container or PID namespace?)"
                ),
                "find it, stop it and run again".to_string(),
            )
        }
        (Some(_), None) if mode == OtherProcesses::Error => {
            return Some(ok(sub, r, "none", expected))
        }
        (None, None) if mode == OtherProcesses::Error => return Some(na(sub, r, expected)),
        _ => return None,
    };
    Some(match mode {
        OtherProcesses::Error => bad(
            Status::Error,
            sub,
            r,
            found,
            expected,
            format!(
                "{what}: what is measured beside it is a share of the GPU, not the GPU; {then}"
            ),
        ),
        OtherProcesses::Shown => finding(
            Status::Pass,
            sub.clone(),
            found,
            "shown, not judged",
            format!("{what} (checks.health.other_processes = \"shown\")"),
        )
        .on(r.key())
        .informational(),
    })
}

/// What nodecert found where CUDA looks for the MPS control daemon when it started. A daemon
/// takes no GPU and does not change what nodecert measures (nodecert goes around it,
/// `platform::mps`), but every CUDA job started on the node that reaches it shares the GPUs
/// through an MPS server, under that server's limits: a warning, which the certificate shows.
/// None there is noted, not counted as a judgement: a host file nodecert always reads would
/// otherwise make a judgement of a node whose platform gives nothing else (a VM that hides
/// every NVML reading is "nothing judged", and stays so). With `other_processes = "shown"`, a
/// daemon is information and none is not mentioned. Nothing is said where nodecert did not
/// look (older evidence).
fn mps_finding(inv: &Inventory, mode: OtherProcesses) -> Option<Finding> {
    let m = inv.mps.as_ref()?;
    let r = Reading::Processes;
    let expected = "no MPS control daemon";
    if !m.socket {
        return (mode == OtherProcesses::Error).then(|| {
            finding(
                Status::Pass,
                Subject::node(),
                "none",
                expected,
                format!("{} (where CUDA looks for one)", m.describe()),
            )
            .on(r.key())
            .informational()
        });
    }
    let what = format!(
        "found {}: CUDA jobs started on this node that reach it share the GPUs through an MPS \
         server, under that server's limits",
        m.describe()
    );
    Some(match mode {
        OtherProcesses::Error => bad(
            Status::Warn,
            &Subject::node(),
            r,
            "MPS control daemon",
            expected,
            format!(
                "{what}. nodecert's own work goes around it (its CUDA_MPS_PIPE_DIRECTORY is {}), \
                 so its figures are the GPUs' own; stop the daemon (`echo quit | \
                 nvidia-cuda-mps-control`) if this node is not meant to share its GPUs",
                crate::platform::mps::NOWHERE
            ),
        ),
        OtherProcesses::Shown => finding(
            Status::Pass,
            Subject::node(),
            "MPS control daemon",
            "shown, not judged",
            format!("{what} (checks.health.other_processes = \"shown\")"),
        )
        .on(r.key())
        .informational(),
    })
}

/// The findings of one GPU: one per reading (a pass, a skip, or the problems found in it).
/// `mode`: what another process on it means.
fn gpu_findings(h: &HealthCheck, g: &Gpu, mode: OtherProcesses) -> Vec<Finding> {
    let sub = &Subject::gpu(g.index);
    let who = &sub.describe();
    let mut out: Vec<Finding> = processes_finding(sub, g, mode).into_iter().collect();

    if h.require_ecc {
        let r = Reading::EccMode;
        out.push(match g.ecc_enabled.filter(|_| g.gives(r)) {
            Some(true) => ok(sub, r, "ECC on", "ECC on"),
            Some(false) => bad(
                Status::Fail,
                sub,
                r,
                "ECC off",
                "ECC on",
                format!("{who}: ECC is disabled"),
            ),
            None => na(sub, r, "ECC on"),
        });
    }

    let r = Reading::EccErrors;
    if g.gives(r) {
        let e = &g.ecc;
        let mut p = Vec::new();
        let unc = [e.volatile_uncorrected, e.sram_uncorrected]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(0);
        if unc > h.max_uncorrectable {
            p.push(bad(
                Status::Fail,
                sub,
                r,
                format!("{unc} uncorrectable"),
                format!("<= {}", h.max_uncorrectable),
                format!("{who}: {unc} uncorrectable ECC error(s)"),
            ));
        }
        if let Some(c) = e.sram_corrected.filter(|c| *c > h.max_sram_correctable) {
            p.push(bad(
                Status::Fail,
                sub,
                r,
                format!("{c} SRAM corrected"),
                format!("<= {}", h.max_sram_correctable),
                format!("{who}: {c} correctable SRAM errors"),
            ));
        }
        if let Some(c) = e.dram_errors.filter(|c| *c > h.max_dram_errors) {
            p.push(bad(
                Status::Fail,
                sub,
                r,
                format!("{c} DRAM errors"),
                format!("<= {}", h.max_dram_errors),
                format!("{who}: {c} DRAM errors"),
            ));
        }
        if p.is_empty() {
            out.push(ok(
                sub,
                r,
                format!("{unc} uncorrectable"),
                format!("<= {}", h.max_uncorrectable),
            ));
        }
        out.extend(p);
        // Each ECC limit the suite states, where the GPU does not count what it limits: not
        // judged, and said (an unread count is not 0). The uncorrectable limit is judged above
        // on the counts read, so one of its two counts not read is said here too.
        for (what, read, limit) in [
            (
                "uncorrectable ECC error count (volatile)",
                e.volatile_uncorrected,
                h.max_uncorrectable,
            ),
            (
                "SRAM uncorrectable error count",
                e.sram_uncorrected,
                h.max_uncorrectable,
            ),
            (
                "SRAM correctable error count",
                e.sram_corrected,
                h.max_sram_correctable,
            ),
            ("DRAM error count", e.dram_errors, h.max_dram_errors),
        ] {
            if read.is_none() {
                out.push(
                    finding(
                        Status::Skip,
                        sub.clone(),
                        "not available here",
                        format!("<= {limit}"),
                        format!("not available here: {what} of {who}"),
                    )
                    .on(r.key()),
                );
            }
        }
    } else {
        out.push(na(
            sub,
            r,
            format!("<= {} uncorrectable", h.max_uncorrectable),
        ));
    }

    let r = Reading::RemappedRows;
    if g.gives(r) {
        let mut p = Vec::new();
        if let Some(rows) = &g.remapped_rows {
            // One the suite does not fail on is still said, as a warning: never "none pending".
            for (seen, fails, option, found, expected, what) in [
                (
                    rows.pending,
                    h.fail_on_remap_pending,
                    "fail_on_remap_pending",
                    "remap pending",
                    "no pending remap",
                    "a row remap is pending: the GPU must be reset before use",
                ),
                (
                    rows.failure,
                    h.fail_on_remap_failure,
                    "fail_on_remap_failure",
                    "remap failed",
                    "no failed remap",
                    "a row remap failed: the GPU is out of spare rows",
                ),
            ] {
                if !seen {
                    continue;
                }
                let (status, why) = match fails {
                    true => (Status::Fail, format!("{who}: {what}")),
                    false => (
                        Status::Warn,
                        format!("{who}: {what} (a warning: the suite sets {option} = false)"),
                    ),
                };
                p.push(bad(status, sub, r, found, expected, why));
            }
        }
        if g.retired_pages.as_ref().is_some_and(|x| x.pending) {
            p.push(bad(
                Status::Warn,
                sub,
                r,
                "page retirement pending",
                "none pending",
                format!("{who}: a page retirement is pending (reset needed)"),
            ));
        }
        if p.is_empty() {
            out.push(ok(
                sub,
                r,
                "none pending or failed",
                "no pending or failed remap",
            ));
        }
        out.extend(p);
    } else {
        out.push(na(sub, r, "no pending or failed remap"));
    }

    // XIDs: an event seen is judged even when a source was missing; no event proves nothing
    // unless a source was there to see one.
    let r = Reading::Xids;
    // Kernel-log XIDs older than the look-back (logged since boot, perhaps before a GPU reset)
    // are history: listed in one warning, not judged.
    let (recent, history) = split_xids(&g.xids, h.xid_lookback_h);
    for x in &recent {
        let fatal = h.fail_xids.contains(&x.code);
        out.push(bad(
            if fatal { Status::Fail } else { Status::Warn },
            sub,
            r,
            format!("XID {}", x.code),
            "no XID",
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
        ));
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
        out.push(bad(
            Status::Warn,
            sub,
            r,
            format!("{} older XID(s)", history.len()),
            format!("judged: XIDs of the last {} h", h.xid_lookback_h),
            format!(
                "{who}: history, not judged: {} logged before the {} h look-back",
                list.join(", "),
                h.xid_lookback_h
            ),
        ));
    }
    if recent.is_empty() {
        out.push(if g.gives(r) {
            ok(sub, r, "none", "no XID")
        } else {
            na(sub, r, "no XID")
        });
    }
    // Events seen during the run, but no log of those before it: the look-back is not judged.
    if h.xid_lookback_h > 0.0 && g.gives(r) && !g.gives(Reading::XidHistory) {
        out.push(na(
            sub,
            Reading::XidHistory,
            format!("no XID in the {} h before the run", h.xid_lookback_h),
        ));
    }

    let r = Reading::PcieReplays;
    let limit = format!("<= {}", h.max_pcie_replays);
    out.push(match g.pcie.replay_counter.filter(|_| g.gives(r)) {
        Some(n) if n > h.max_pcie_replays => bad(
            Status::Fail,
            sub,
            r,
            format!("{n} replays"),
            limit,
            format!("{who}: {n} PCIe replays (limit {})", h.max_pcie_replays),
        ),
        Some(n) => ok(sub, r, format!("{n} replays"), limit),
        None => na(sub, r, limit),
    });

    // NVLink: a GPU without links has no counters to give and none to judge; one whose link
    // state could not be read may have links with counters no one read (those read are judged):
    // one finding says what was not read.
    let state_unread = !g.gives(Reading::NvlinkState);
    let state_why = " (its NVLink state could not be read, so not every link's counters were)";
    let mut said = false;
    let r = Reading::NvlinkErrors;
    let active: Vec<_> = g.nvlinks.iter().filter(|l| l.active).collect();
    if !active.is_empty() {
        let limit = format!("<= {} per link", h.max_nvlink_errors);
        let mut p = Vec::new();
        let mut unread = Vec::new();
        let mut partly = Vec::new();
        for l in &active {
            match l.errors.read() {
                None => unread.push(l.link.to_string()),
                Some((errs, missing)) => {
                    if !missing.is_empty() {
                        partly.push(format!("link {}: {} not read", l.link, missing.join(", ")));
                    }
                    if errs > h.max_nvlink_errors {
                        p.push(bad(
                            Status::Fail,
                            &Subject::link(g.index, l.link),
                            r,
                            format!("{errs} errors"),
                            format!("<= {}", h.max_nvlink_errors),
                            format!("{who} link {}: {errs} {}", l.link, l.errors.words()),
                        ));
                    }
                }
            }
        }
        if !unread.is_empty() {
            let mut f = na(sub, r, limit.clone());
            if unread.len() < active.len() {
                f.reason = format!("{} (links {})", f.reason, unread.join(", "));
            }
            if state_unread {
                f.reason.push_str(state_why);
            }
            said = true;
            out.push(f);
        } else if p.is_empty() {
            let mut f = ok(
                sub,
                r,
                format!("{} active links within limits", active.len()),
                limit.clone(),
            );
            if !partly.is_empty() {
                f.found = format!("{} (of the counters read)", f.found);
                f.reason = format!("{} (of the counters read)", f.reason);
            }
            out.push(f);
        }
        out.extend(p);
        // A counter a link did not give is unknown, not 0: the errors it counts were not judged.
        if !partly.is_empty() {
            let mut f = na(sub, r, limit);
            f.reason = format!("{}: {}", f.reason, partly.join("; "));
            out.push(f);
        }
    }
    if state_unread && !said {
        let mut f = na(sub, r, format!("<= {} per link", h.max_nvlink_errors));
        f.reason.push_str(state_why);
        out.push(f);
    }

    let r = Reading::ThrottleReasons;
    if g.gives(r) {
        let held: Vec<&String> = g
            .throttle_reasons
            .iter()
            .filter(|t| h.fail_throttle.contains(t))
            .collect();
        for t in &held {
            out.push(bad(
                Status::Fail,
                sub,
                r,
                t.to_string(),
                "not throttled",
                format!("{who}: clocks held back by {t}"),
            ));
        }
        if held.is_empty() {
            out.push(ok(
                sub,
                r,
                if g.throttle_reasons.is_empty() {
                    "none".to_string()
                } else {
                    g.throttle_reasons.join(", ")
                },
                "not throttled",
            ));
        }
    } else {
        out.push(na(sub, r, "not throttled"));
    }

    if let Some(w) = h.warn_temperature_c {
        let r = Reading::Temperature;
        let limit = format!("<= {w:.0} °C");
        out.push(match g.temperature_c.filter(|_| g.gives(r)) {
            Some(t) if t > w => bad(
                Status::Warn,
                sub,
                r,
                format!("{t:.0} °C"),
                limit,
                format!("{who}: {t:.0} °C at rest"),
            ),
            Some(t) => ok(sub, r, format!("{t:.0} °C"), limit),
            None => na(sub, r, limit),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Evidence;
    use crate::inventory::{Inventory, RemappedRows, RetiredPages, XidEvent};

    /// The health findings of a simulated `node` after `edit` changed what was read.
    fn judge(node: &str, edit: impl FnOnce(&mut Inventory)) -> Vec<Finding> {
        judge_with(node, |_| {}, edit)
    }

    /// [`judge`] with the suite's health check changed by `cfg`.
    fn judge_with(
        node: &str,
        cfg: impl FnOnce(&mut HealthCheck),
        edit: impl FnOnce(&mut Inventory),
    ) -> Vec<Finding> {
        let ev: Evidence = crate::testutil::simulated(node, &[]);
        let mut inv = ev.node.clone();
        edit(&mut inv);
        let mut c = ev.suite.resolved.checks.health.clone().expect("health");
        cfg(&mut c);
        let cfg = c;
        let ctx = Ctx {
            suite: &ev.suite.resolved,
            inventory: &inv,
            earlier: &[],
            simulated: true,
        };
        Health(cfg).evaluate(&ctx, &Measured::default())
    }

    /// The findings about `subject` on reading `r`.
    fn on<'a>(f: &'a [Finding], subject: &str, r: Reading) -> Vec<&'a Finding> {
        f.iter()
            .filter(|x| x.subject.describe() == subject && x.metric.as_deref() == Some(r.key()))
            .collect()
    }

    fn status(f: &[Finding], subject: &str, r: Reading) -> Vec<Status> {
        on(f, subject, r).iter().map(|x| x.status).collect()
    }

    /// Another process on a GPU, listed or seen only by the memory it holds, is an error of that
    /// GPU (the node cannot be measured), never a pass; an unread list is not "none".
    #[test]
    fn other_processes_on_a_gpu_are_an_error_naming_them() {
        let r = Reading::Processes;
        let gib = 1u64 << 30;
        let job = |pid, name: &str, gb: u64| GpuProcess {
            pid,
            name: Some(name.into()),
            memory_bytes: Some(gb * gib),
        };
        let f = judge("h100-sxm-8", |inv| {
            let g = &mut inv.gpus;
            g[1].processes = Some(vec![job(4242, "python3", 30)]);
            g[1].memory_used_bytes = Some(30 * gib + gib / 2);
            g[2].processes = Some(vec![job(7, "nvidia-cuda-mps-server", 0), job(8, "a", 1)]);
            // Memory that no listed process holds: just below the limit, and at it.
            g[3].memory_used_bytes = Some(UNLISTED_MEMORY_LIMIT - 1);
            g[4].memory_used_bytes = Some(UNLISTED_MEMORY_LIMIT);
            // Memory not read: the empty list alone says none.
            g[5].memory_used_bytes = None;
            g[6].processes = None;
            g[7].processes = None;
            g[7].memory_used_bytes = Some(2 * gib);
        });
        let one = |gpu: &str| {
            let x = on(&f, gpu, r);
            assert_eq!(x.len(), 1, "{x:#?}");
            (x[0].status, x[0].found.clone(), x[0].reason.clone())
        };
        let (st, found, why) = one("GPU 1");
        assert_eq!((st, found.as_str()), (Status::Error, "1 other process"));
        assert_eq!(
            why,
            "GPU 1 is in use by pid 4242 (python3, 30 GiB): what is measured beside it is a \
             share of the GPU, not the GPU; stop it and run again (`nvidia-smi \
             --query-compute-apps=pid,process_name,used_memory --format=csv` lists them)"
        );
        let (st, found, why) = one("GPU 2");
        assert_eq!((st, found.as_str()), (Status::Error, "2 other processes"));
        assert!(
            why.starts_with(
                "GPU 2 is in use by pid 7 (nvidia-cuda-mps-server, 0 B), pid 8 (a, 1 GiB): "
            ) && why.ends_with(
                "an MPS server holds it, so every process shares the GPU through it; stop MPS \
                 (`echo quit | nvidia-cuda-mps-control`) and run again"
            ),
            "{why}"
        );
        assert_eq!(one("GPU 3").0, Status::Pass);
        let (st, found, why) = one("GPU 4");
        assert_eq!(
            (st, found.as_str()),
            (Status::Error, "1 GiB in use, no process listed")
        );
        assert!(
            why.starts_with("GPU 4 has 1 GiB of memory in use that no process NVML lists"),
            "{why}"
        );
        assert_eq!(one("GPU 5").0, Status::Pass);
        let (st, _, why) = one("GPU 6");
        assert_eq!(
            (st, why.as_str()),
            (Status::Skip, "not available here: processes of GPU 6")
        );
        let (st, found, _) = one("GPU 7");
        assert_eq!(
            (st, found.as_str()),
            (Status::Error, "2 GiB in use, no process listed")
        );
        assert_eq!(one("GPU 0").0, Status::Pass);
        assert_eq!(one("GPU 0").1, "none");
    }

    /// With `other_processes = "shown"` (health-check's default: jobs run beside it) a process
    /// found is information, not a judgement, and nothing is said where none is or the list is
    /// unread; "error" says all of it, as a run does.
    #[test]
    fn shown_other_processes_are_information_only() {
        let edit = |inv: &mut Inventory| {
            inv.gpus[1].processes = Some(vec![GpuProcess {
                pid: 4242,
                name: Some("python3".into()),
                memory_bytes: Some(30 << 30),
            }]);
            inv.gpus[2].processes = None;
            inv.gpus[3].memory_used_bytes = Some(2 << 30);
        };
        let r = Reading::Processes;
        let shown = |h: &mut HealthCheck| h.other_processes = Some(OtherProcesses::Shown);
        let f = judge_with("h100-sxm-8", shown, edit);
        let g1 = on(&f, "GPU 1", r);
        assert_eq!(g1.len(), 1);
        assert_eq!(
            (g1[0].status, g1[0].info, g1[0].reason.as_str()),
            (
                Status::Pass,
                true,
                "GPU 1 is in use by pid 4242 (python3, 30 GiB) \
                 (checks.health.other_processes = \"shown\")"
            )
        );
        assert!(on(&f, "GPU 3", r)[0]
            .reason
            .starts_with("GPU 3 has 2 GiB of memory in use"));
        for quiet in ["GPU 0", "GPU 2", "GPU 4"] {
            assert!(on(&f, quiet, r).is_empty(), "{quiet}");
        }
        let said = |m| {
            let f = judge_with("h100-sxm-8", |h| h.other_processes = m, edit);
            (0..5)
                .map(|g| status(&f, &format!("GPU {g}"), r))
                .collect::<Vec<_>>()
        };
        let error = vec![
            vec![Status::Pass],
            vec![Status::Error],
            vec![Status::Skip],
            vec![Status::Error],
            vec![Status::Pass],
        ];
        assert_eq!(said(None), error);
        assert_eq!(said(Some(OtherProcesses::Error)), error);
    }

    /// An MPS control daemon where CUDA looks warns, naming where and that nodecert went
    /// around it; none there is noted, not counted; with `other_processes = "shown"` a daemon is information
    /// and none is not mentioned; where nodecert did not look, nothing is said.
    #[test]
    fn an_mps_daemon_warns_none_passes_and_shown_informs() {
        let r = Reading::Processes;
        let node = Subject::node().describe();
        let mps = |socket, pid| {
            move |inv: &mut Inventory| {
                inv.mps = Some(crate::inventory::Mps {
                    pipe_dir: "/run/nvidia/mps/pipe".into(),
                    socket,
                    pid,
                })
            }
        };
        let f = judge("h100-sxm-8", mps(true, Some(77)));
        let w = on(&f, &node, r);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].status, w[0].info), (Status::Warn, false));
        assert_eq!(
            w[0].reason,
            "found the MPS control daemon at /run/nvidia/mps/pipe (pid 77): CUDA jobs started on \
             this node that reach it share the GPUs through an MPS server, under that server's \
             limits. nodecert's own work goes around it (its CUDA_MPS_PIPE_DIRECTORY is \
             /dev/null), so its figures are the GPUs' own; stop the daemon (`echo quit | \
             nvidia-cuda-mps-control`) if this node is not meant to share its GPUs"
        );
        let f = judge("h100-sxm-8", mps(true, None));
        assert!(on(&f, &node, r)[0].reason.starts_with(
            "found the socket of an MPS control daemon at /run/nvidia/mps/pipe (no one daemon \
             process seen from here: "
        ));
        let none = judge("h100-sxm-8", mps(false, None));
        let p = on(&none, &node, r);
        assert_eq!(
            (p.len(), p[0].status, p[0].info, p[0].reason.as_str()),
            (
                1,
                Status::Pass,
                true,
                "no MPS control daemon at /run/nvidia/mps/pipe (where CUDA looks for one)"
            )
        );
        let shown = |h: &mut HealthCheck| h.other_processes = Some(OtherProcesses::Shown);
        let f = judge_with("h100-sxm-8", shown, mps(true, Some(77)));
        let i = on(&f, &node, r);
        assert_eq!((i.len(), i[0].status, i[0].info), (1, Status::Pass, true));
        assert!(i[0]
            .reason
            .ends_with("under that server's limits (checks.health.other_processes = \"shown\")"));
        assert!(on(&judge_with("h100-sxm-8", shown, mps(false, None)), &node, r).is_empty());
        assert!(on(&judge("h100-sxm-8", |inv| inv.mps = None), &node, r).is_empty());
    }

    #[test]
    fn a_healthy_node_passes_every_reading_of_every_gpu() {
        let f = judge("h100-sxm-8", |_| {});
        for g in 0..8 {
            let who = format!("GPU {g}");
            for r in [
                Reading::EccMode,
                Reading::EccErrors,
                Reading::RemappedRows,
                Reading::Xids,
                Reading::PcieReplays,
                Reading::NvlinkErrors,
                Reading::ThrottleReasons,
                Reading::Temperature,
                Reading::Processes,
            ] {
                assert_eq!(status(&f, &who, r), vec![Status::Pass], "{who} {r:?}");
            }
        }
        assert_eq!(
            status(&f, "node", Reading::DriverVersion),
            vec![Status::Pass]
        );
    }

    #[test]
    fn nvlink_errors_are_judged_per_link_against_the_limit() {
        let set =
            |n: u64| move |inv: &mut Inventory| inv.gpus[2].nvlinks[5].errors.replay = Some(n);
        // At the limit (100) passes; one more fails, naming the link.
        assert_eq!(
            status(
                &judge("h100-sxm-8", set(100)),
                "GPU 2",
                Reading::NvlinkErrors
            ),
            vec![Status::Pass]
        );
        let f = judge("h100-sxm-8", set(101));
        assert_eq!(
            status(&f, "GPU 2 link 5", Reading::NvlinkErrors),
            vec![Status::Fail]
        );
        assert!(
            status(&f, "GPU 2", Reading::NvlinkErrors).is_empty(),
            "no pass beside it"
        );
        // The counters add up: 60 + 41 is over 100.
        let f = judge("h100-sxm-8", |inv| {
            let e = &mut inv.gpus[2].nvlinks[5].errors;
            e.replay = Some(60);
            e.crc_flit = Some(41);
        });
        assert_eq!(
            status(&f, "GPU 2 link 5", Reading::NvlinkErrors),
            vec![Status::Fail]
        );
        // A Hopper link's data errors counted by ECC add up as the CRC ones do, and are called
        // what they are.
        let f = judge("h100-sxm-8", |inv| {
            let e = &mut inv.gpus[2].nvlinks[5].errors;
            e.crc_data = None;
            e.replay = Some(60);
            e.ecc_data = Some(41);
        });
        assert_eq!(
            status(&f, "GPU 2 link 5", Reading::NvlinkErrors),
            vec![Status::Fail]
        );
        let bad = on(&f, "GPU 2 link 5", Reading::NvlinkErrors);
        assert!(
            bad[0]
                .reason
                .ends_with("link 5: 101 NVLink errors (replay, recovery, flit CRC, data ECC)"),
            "{}",
            bad[0].reason
        );
    }

    #[test]
    fn unread_nvlink_counters_are_not_zero() {
        // One link gives no counter: GPU 3's counters are not available, not within limits.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[3].nvlinks[7].errors = Default::default();
        });
        let na = on(&f, "GPU 3", Reading::NvlinkErrors);
        assert_eq!(na.len(), 1);
        assert_eq!(na[0].status, Status::Skip);
        assert_eq!(
            na[0].reason,
            "not available here: NVLink error counters of GPU 3 (links 7)"
        );
        // A link with some counters is judged on those, and the counters it did not give are
        // not available (the check is partial), never taken as none.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[3].nvlinks[7].errors.crc_data = None;
        });
        let ok = on(&f, "GPU 3", Reading::NvlinkErrors);
        assert_eq!(
            ok.iter().map(|x| x.status).collect::<Vec<_>>(),
            [Status::Pass, Status::Skip]
        );
        assert!(
            ok[0].found.ends_with("(of the counters read)"),
            "{}",
            ok[0].found
        );
        assert_eq!(
            ok[1].reason,
            "not available here: NVLink error counters of GPU 3: link 7: data (crc_data or \
             ecc_data) not read"
        );
        let (_, _, coverage) = crate::runner::summarize_with_coverage(&f);
        assert!(coverage.is_some_and(|c| c.partial()));
        // Errors on the counters read still fail it.
        let f = judge("h100-sxm-8", |inv| {
            let e = &mut inv.gpus[3].nvlinks[7].errors;
            e.crc_data = None;
            e.replay = Some(500);
        });
        let x = on(&f, "GPU 3 link 7", Reading::NvlinkErrors);
        assert_eq!(x[0].status, Status::Fail);
        // Its data errors counted by ECC instead (NVLink 4): read, nothing said missing.
        let f = judge("h100-sxm-8", |inv| {
            let e = &mut inv.gpus[3].nvlinks[7].errors;
            e.crc_data = None;
            e.ecc_data = Some(0);
        });
        let ok = on(&f, "GPU 3", Reading::NvlinkErrors);
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].status, Status::Pass);
        assert!(!ok[0].found.contains("counters read"), "{}", ok[0].found);
        // A GPU whose links give no counter at all.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[3]
                .nvlinks
                .iter_mut()
                .for_each(|l| l.errors = Default::default());
        });
        assert_eq!(
            on(&f, "GPU 3", Reading::NvlinkErrors)[0].reason,
            "not available here: NVLink error counters of GPU 3"
        );
    }

    #[test]
    fn pcie_replays_are_judged_against_the_limit() {
        let set = |n: Option<u64>| move |inv: &mut Inventory| inv.gpus[1].pcie.replay_counter = n;
        let st = |n| status(&judge("h100-sxm-8", set(n)), "GPU 1", Reading::PcieReplays);
        assert_eq!(st(Some(80)), vec![Status::Pass]);
        assert_eq!(st(Some(81)), vec![Status::Fail]);
        assert_eq!(st(None), vec![Status::Skip]);
    }

    #[test]
    fn unread_throttle_reasons_are_not_not_throttled() {
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[4].unavailable.push(Reading::ThrottleReasons)
        });
        let x = on(&f, "GPU 4", Reading::ThrottleReasons);
        assert_eq!(x.len(), 1);
        assert_eq!(x[0].status, Status::Skip);
        assert_eq!(x[0].reason, "not available here: throttle reasons of GPU 4");
        let with = |t: &str| {
            let t = t.to_string();
            status(
                &judge("h100-sxm-8", move |inv| {
                    inv.gpus[4].throttle_reasons = vec![t]
                }),
                "GPU 4",
                Reading::ThrottleReasons,
            )
        };
        assert_eq!(with("hw_slowdown"), vec![Status::Fail]);
        assert_eq!(with("gpu_idle"), vec![Status::Pass]);
    }

    #[test]
    fn xids_need_a_source_and_fatal_ones_fail() {
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[0].unavailable.push(Reading::Xids)
        });
        assert_eq!(status(&f, "GPU 0", Reading::Xids), vec![Status::Skip]);
        let xid = |code: u32, hidden: bool| xid_aged(code, hidden, None);
        assert_eq!(xid(79, false), vec![Status::Fail]);
        // Within the 24 h look-back of the suite, judged; older, history (a warning) and the
        // reading itself holds: no XID in the window.
        assert_eq!(xid_aged(79, false, Some(23.0 * 3600.0)), vec![Status::Fail]);
        assert_eq!(
            xid_aged(79, false, Some(25.0 * 3600.0)),
            vec![Status::Warn, Status::Pass]
        );
        assert_eq!(
            xid_aged(79, true, Some(25.0 * 3600.0)),
            vec![Status::Warn, Status::Skip]
        );
        assert_eq!(xid(13, false), vec![Status::Warn]);
        // An XID seen by one source is judged even when another source was missing.
        assert_eq!(xid(79, true), vec![Status::Fail]);
    }

    #[test]
    fn events_without_the_kernel_log_leave_the_look_back_unjudged() {
        // NVML's events saw the run, but the kernel log (dmesg_restrict, a VM) is not readable:
        // "none" holds for the run; the 24 h before it is not judged, and says so.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[0].unavailable.push(Reading::XidHistory)
        });
        assert_eq!(status(&f, "GPU 0", Reading::Xids), vec![Status::Pass]);
        let before = on(&f, "GPU 0", Reading::XidHistory);
        assert_eq!(before.len(), 1, "{f:#?}");
        assert_eq!(before[0].status, Status::Skip);
        assert_eq!(
            before[0].reason,
            "not available here: XID events logged before the run of GPU 0"
        );
        assert!(on(&f, "GPU 1", Reading::XidHistory).is_empty());
        // A suite that judges this run's XIDs only has no look-back to miss.
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let mut inv = ev.node.clone();
        inv.gpus[0].unavailable.push(Reading::XidHistory);
        let mut cfg = ev.suite.resolved.checks.health.clone().expect("health");
        cfg.xid_lookback_h = 0.0;
        let ctx = Ctx {
            suite: &ev.suite.resolved,
            inventory: &inv,
            earlier: &[],
            simulated: true,
        };
        let f = Health(cfg).evaluate(&ctx, &Measured::default());
        assert!(on(&f, "GPU 0", Reading::XidHistory).is_empty());
        // Without any source, the one finding says no XID could have been seen.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[0].unavailable.push(Reading::Xids);
            inv.gpus[0].unavailable.push(Reading::XidHistory);
        });
        assert_eq!(status(&f, "GPU 0", Reading::Xids), vec![Status::Skip]);
        assert!(on(&f, "GPU 0", Reading::XidHistory).is_empty());
    }

    #[test]
    fn ages_read_in_seconds_hours_then_days_from_two_days_on() {
        assert_eq!(fmt_age(40.0), "40 s");
        assert_eq!(fmt_age(3600.0), "1.0 h");
        // A day and a half is still hours: days start at two.
        assert_eq!(fmt_age(36.0 * 3600.0), "36.0 h");
        assert_eq!(fmt_age(2.0 * 86400.0), "2.0 d");
        assert_eq!(fmt_age(3.0 * 86400.0), "3.0 d");
    }

    fn xid_aged(code: u32, hidden: bool, age_s: Option<f64>) -> Vec<Status> {
        {
            status(
                &judge("h100-sxm-8", move |inv| {
                    let g = &mut inv.gpus[0];
                    g.xids.push(XidEvent {
                        code,
                        source: "kernel log".into(),
                        detail: None,
                        age_s,
                    });
                    if hidden {
                        g.unavailable.push(Reading::Xids);
                    }
                }),
                "GPU 0",
                Reading::Xids,
            )
        }
    }

    #[test]
    fn ecc_mode_and_counts_are_judged() {
        let f = judge("h100-sxm-8", |inv| inv.gpus[6].ecc_enabled = Some(false));
        assert_eq!(status(&f, "GPU 6", Reading::EccMode), vec![Status::Fail]);
        let f = judge("h100-sxm-8", |inv| inv.gpus[6].ecc_enabled = None);
        assert_eq!(status(&f, "GPU 6", Reading::EccMode), vec![Status::Skip]);
        let ecc = |edit: fn(&mut crate::inventory::EccCounts)| {
            status(
                &judge("h100-sxm-8", move |inv| edit(&mut inv.gpus[6].ecc)),
                "GPU 6",
                Reading::EccErrors,
            )
        };
        assert_eq!(
            ecc(|e| e.volatile_uncorrected = Some(1)),
            vec![Status::Fail]
        );
        assert_eq!(ecc(|e| e.sram_uncorrected = Some(1)), vec![Status::Fail]);
        assert_eq!(ecc(|e| e.sram_corrected = Some(10_000)), vec![Status::Pass]);
        assert_eq!(ecc(|e| e.sram_corrected = Some(10_001)), vec![Status::Fail]);
        assert_eq!(
            ecc(|e| e.dram_errors = Some(20_000_000)),
            vec![Status::Pass]
        );
        assert_eq!(
            ecc(|e| e.dram_errors = Some(20_000_001)),
            vec![Status::Fail]
        );
        assert_eq!(ecc(|e| *e = Default::default()), vec![Status::Skip]);
        // The uncorrectable count read, the SRAM or DRAM count not: each limit the suite states
        // for them is not judged, and says so.
        assert_eq!(
            ecc(|e| e.sram_corrected = None),
            vec![Status::Pass, Status::Skip]
        );
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[6].ecc.sram_corrected = None;
            inv.gpus[6].ecc.dram_errors = None;
        });
        let said: Vec<&str> = on(&f, "GPU 6", Reading::EccErrors)
            .iter()
            .filter(|x| x.status == Status::Skip)
            .map(|x| x.reason.as_str())
            .collect();
        assert_eq!(
            said,
            [
                "not available here: SRAM correctable error count of GPU 6",
                "not available here: DRAM error count of GPU 6"
            ]
        );
        // Even with uncorrectable errors over their limit: the failure stands, and the unread
        // counts are still said.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[6].ecc.volatile_uncorrected = Some(3);
            inv.gpus[6].ecc.dram_errors = None;
        });
        assert_eq!(
            status(&f, "GPU 6", Reading::EccErrors),
            vec![Status::Fail, Status::Skip]
        );
        // One uncorrectable count read and the other not: judged on the one read, the other
        // said, never taken for 0.
        for (volatile, sram, missing) in [
            (Some(0), None, "SRAM uncorrectable error count"),
            (None, Some(0), "uncorrectable ECC error count (volatile)"),
        ] {
            let f = judge("h100-sxm-8", move |inv| {
                inv.gpus[6].ecc.volatile_uncorrected = volatile;
                inv.gpus[6].ecc.sram_uncorrected = sram;
            });
            let all = on(&f, "GPU 6", Reading::EccErrors);
            assert_eq!(
                all.iter().map(|x| x.status).collect::<Vec<_>>(),
                [Status::Pass, Status::Skip],
                "{all:#?}"
            );
            assert_eq!(
                all[1].reason,
                format!("not available here: {missing} of GPU 6")
            );
        }
    }

    #[test]
    fn remaps_and_retirements_are_judged() {
        let rows = |r: RemappedRows| {
            status(
                &judge("h100-sxm-8", move |inv| inv.gpus[5].remapped_rows = Some(r)),
                "GPU 5",
                Reading::RemappedRows,
            )
        };
        assert_eq!(rows(RemappedRows::default()), vec![Status::Pass]);
        assert_eq!(
            rows(RemappedRows {
                pending: true,
                ..Default::default()
            }),
            vec![Status::Fail]
        );
        assert_eq!(
            rows(RemappedRows {
                failure: true,
                ..Default::default()
            }),
            vec![Status::Fail]
        );
        // A suite that does not fail on them still hears of them, as a warning naming the
        // option; never "none pending".
        let off = |r: RemappedRows| {
            judge_with(
                "h100-sxm-8",
                |c| {
                    c.fail_on_remap_pending = false;
                    c.fail_on_remap_failure = false;
                },
                move |inv| inv.gpus[5].remapped_rows = Some(r),
            )
        };
        let f = off(RemappedRows {
            pending: true,
            failure: true,
            ..Default::default()
        });
        assert_eq!(
            status(&f, "GPU 5", Reading::RemappedRows),
            vec![Status::Warn, Status::Warn]
        );
        let text: Vec<&str> = f
            .iter()
            .filter(|x| x.metric.as_deref() == Some(Reading::RemappedRows.key()))
            .filter(|x| x.subject.describe() == "GPU 5")
            .map(|x| x.reason.as_str())
            .collect();
        assert!(
            text[0].contains("a row remap is pending")
                && text[0].contains("fail_on_remap_pending = false"),
            "{text:?}"
        );
        assert!(
            text[1].contains("a row remap failed")
                && text[1].contains("fail_on_remap_failure = false"),
            "{text:?}"
        );
        assert!(!f
            .iter()
            .any(|x| x.subject.describe() == "GPU 5" && x.found.contains("none pending")));
        assert_eq!(
            status(
                &off(RemappedRows::default()),
                "GPU 5",
                Reading::RemappedRows
            ),
            vec![Status::Pass]
        );
        let f = judge("a100-sxm-80gb-8", |inv| {
            inv.gpus[5].retired_pages = Some(RetiredPages {
                pending: true,
                ..Default::default()
            })
        });
        assert_eq!(
            status(&f, "GPU 5", Reading::RemappedRows),
            vec![Status::Warn]
        );
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[5].remapped_rows = None;
            inv.gpus[5].retired_pages = None;
        });
        assert_eq!(
            status(&f, "GPU 5", Reading::RemappedRows),
            vec![Status::Skip]
        );
    }

    #[test]
    fn temperature_and_driver_are_judged() {
        let temp = |t: Option<f64>| {
            status(
                &judge("h100-sxm-8", move |inv| inv.gpus[7].temperature_c = t),
                "GPU 7",
                Reading::Temperature,
            )
        };
        assert_eq!(temp(Some(85.0)), vec![Status::Pass]);
        assert_eq!(temp(Some(86.0)), vec![Status::Warn]);
        assert_eq!(temp(None), vec![Status::Skip]);
        let drv = |v: Option<&str>| {
            let v = v.map(String::from);
            status(
                &judge("h100-sxm-8", move |inv| inv.driver_version = v),
                "node",
                Reading::DriverVersion,
            )
        };
        // h100-sxm-8 asks for 535.104.
        assert_eq!(drv(Some("535.104")), vec![Status::Pass]);
        assert_eq!(drv(Some("535.86")), vec![Status::Fail]);
        assert_eq!(drv(None), vec![Status::Skip]);
        // A version that does not read as numbers is unknown, not older: never a Fail.
        for odd in ["R550-open", "", "550.x"] {
            assert_eq!(drv(Some(odd)), vec![Status::Skip], "{odd:?}");
        }
    }

    #[test]
    fn one_vbios_across_the_node_is_judged() {
        let vb = |f: &[Finding]| -> Vec<(String, Status)> {
            f.iter()
                .filter(|x| x.metric.as_deref() == Some("vbios"))
                .map(|x| (x.subject.describe(), x.status))
                .collect()
        };
        // One version on all eight GPUs: one judgement, held.
        let f = judge("h100-sxm-8", |_| {});
        assert_eq!(vb(&f), vec![("node".to_string(), Status::Pass)]);
        // One GPU flashed differently: the node fails, naming the versions and their GPUs.
        let f = judge("h100-sxm-8", |inv| {
            inv.gpus[5].vbios = Some("96.00.74.00.0C".into())
        });
        assert_eq!(vb(&f), vec![("node".to_string(), Status::Fail)]);
        let x = f
            .iter()
            .find(|x| x.metric.as_deref() == Some("vbios"))
            .unwrap();
        assert!(x.reason.contains("2 VBIOS versions"), "{}", x.reason);
        assert!(x.reason.contains("96.00.74.00.0C on GPU 5"), "{}", x.reason);
        assert!(
            x.reason
                .contains("96.00.74.00.0B on GPUs 0, 1, 2, 3, 4, 6, 7"),
            "{}",
            x.reason
        );
        // A version that was not read is not assumed to match.
        let f = judge("h100-sxm-8", |inv| inv.gpus[2].vbios = None);
        assert_eq!(
            vb(&f),
            vec![
                ("GPU 2".to_string(), Status::Skip),
                ("node".to_string(), Status::Pass)
            ]
        );
        // Only one version read: nothing to compare, no judgement claimed.
        let f = judge("h100-sxm-8", |inv| {
            for g in inv.gpus.iter_mut().skip(1) {
                g.vbios = None;
            }
        });
        assert!(
            vb(&f).iter().all(|(_, st)| *st == Status::Skip),
            "{:?}",
            vb(&f)
        );
        // One GPU: no judgement at all.
        assert!(vb(&judge("h200-vm-1", |_| {})).is_empty());
    }

    #[test]
    fn two_gpus_read_are_enough_to_compare_vbios() {
        let ev: Evidence = crate::testutil::simulated("h100-sxm-8", &[]);
        let st = |gpus: &[Gpu]| -> Vec<(String, Status)> {
            vbios_findings(gpus)
                .into_iter()
                .map(|x| (x.subject.describe(), x.status))
                .collect()
        };
        let node = |s: Status| ("node".to_string(), s);
        // A two-GPU node: one version held, two versions failed.
        let mut two = ev.node.gpus[..2].to_vec();
        assert_eq!(st(&two), vec![node(Status::Pass)]);
        two[1].vbios = Some("96.00.74.00.0C".into());
        assert_eq!(st(&two), vec![node(Status::Fail)]);
        // Eight GPUs of which only two were read: those two are compared, the rest said unread.
        let mut eight = ev.node.gpus.clone();
        for g in eight.iter_mut().skip(2) {
            g.vbios = None;
        }
        let f = st(&eight);
        assert_eq!(f.len(), 7, "{f:?}");
        assert_eq!(f[6], node(Status::Pass));
        assert!(f[..6].iter().all(|(_, s)| *s == Status::Skip), "{f:?}");
        // No VBIOS read on any GPU: each is said unread, and no version is claimed for the node.
        let mut none = ev.node.gpus.clone();
        none.iter_mut().for_each(|g| g.vbios = None);
        let f = st(&none);
        assert_eq!(f.len(), 8, "{f:?}");
        assert!(f.iter().all(|(_, s)| *s == Status::Skip), "{f:?}");
        // A single GPU, even one whose VBIOS was not read, has nothing to be compared with.
        let mut one = ev.node.gpus[..1].to_vec();
        one[0].vbios = None;
        assert!(st(&one).is_empty(), "{:?}", st(&one));
    }

    #[test]
    fn the_vbios_rule_can_be_turned_off() {
        let ev: Evidence = crate::testutil::simulated("h100-sxm-8", &[]);
        let mut inv = ev.node.clone();
        inv.gpus[5].vbios = Some("96.00.74.00.0C".into());
        let mut h: HealthCheck = toml::from_str("").unwrap();
        assert!(vbios_findings(&inv.gpus)
            .iter()
            .any(|x| x.status == Status::Fail));
        h.vbios_must_match = false;
        let suite = crate::suite::load::load("h100-sxm-8").unwrap().suite;
        let ctx = Ctx {
            suite: &suite,
            inventory: &inv,
            earlier: &[],
            simulated: true,
        };
        let f = Health(h).evaluate(&ctx, &Measured::default());
        assert!(f.iter().all(|x| x.metric.as_deref() != Some("vbios")));
    }

    #[test]
    fn no_finding_claims_a_reading_that_was_not_given() {
        let f = judge("h200-vm-1", |inv| {
            let g = &mut inv.gpus[0];
            for r in Reading::ALL {
                crate::backend::sim::hide_for_tests(g, r);
            }
        });
        for x in f.iter().filter(|x| x.subject.describe() == "GPU 0") {
            assert_eq!(x.status, Status::Skip, "{x:?}");
            assert!(x.reason.starts_with("not available here: "), "{}", x.reason);
            assert!(!x.reason.contains("within limits"), "{}", x.reason);
        }
    }
}
