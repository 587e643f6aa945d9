//! XIDs raised, and error counters that grew, while the checks run.
//!
//! The health check judges the XIDs seen when the run starts (NVML's events and the kernel
//! log's look-back) and the error counters as they stand then. A GPU that raises an XID or
//! counts errors under load (a double-bit ECC error during the GEMMs, a page fault in a
//! collective, an NVLink that retries through a bandwidth test) may still finish what nodecert
//! asked of it, and the figures of that check would pass. So after each check that ran on the
//! GPUs the runner reads the XIDs raised since ([`crate::backend::Backend::xids_since`]) and the
//! error counters ([`crate::backend::Backend::error_counts`]), and files what it finds under
//! that check, as the health check judges it:
//! - an XID in the suite's `fail_xids` fails, any other warns;
//! - a counter that grew (uncorrectable ECC errors, SRAM correctable and DRAM errors, PCIe
//!   replays, each active NVLink's errors) fails where it now stands beyond the health check's
//!   limit, and is shown, not judged, where it grew within it; a row remap that became pending or
//!   failed fails where the health check fails one, and a page retirement that became pending
//!   warns.
//!
//! A failure found this way is a fault of the GPU, which the same check measured again would not
//! see again: it is never re-measured away. Where the suite has no health check, nothing is
//! read. A backend that cannot read them, a GPU no source can see an XID on, or a counter the
//! health check found not available adds nothing (the health check names what is not available
//! at the start). A counter read before a check and not after it is not available here for that
//! check, which is then partial: what it counted is not known, so it is not taken for nothing.

use super::judge::finding;
use super::Ctx;
use crate::backend::Backend;
use crate::evidence::{Finding, Status, Subject};
use crate::inventory::{ErrorCounts, Inventory, NvLinkErrors, Reading, XidEvent};
use crate::suite::HealthCheck;

/// The metric the XID findings are filed under (the health check's reading of the same).
const METRIC: &str = "xids";

/// What a reading covers, and so how its findings say when: the check just ended, or the time
/// after the last reading of the run and before its end ([`closing_reading`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// The check that just ended: what the reading finds was raised or counted while it ran.
    Check,
    /// Once more after the last check: what was raised or counted since the last reading (after
    /// the last check that ran on the GPUs, or the node's reading where none did).
    AfterChecks,
}

impl Span {
    /// When what a reading finds happened, as a finding's reason says it.
    fn when(self) -> &'static str {
        match self {
            Span::Check => "while this check ran",
            Span::AfterChecks => "since the last reading, before the run ended",
        }
    }

    /// The same, short, as a finding's figure says it.
    fn during(self) -> &'static str {
        match self {
            Span::Check => "during this check",
            Span::AfterChecks => "after the checks",
        }
    }

    /// When the reading was taken.
    fn read(self) -> &'static str {
        match self {
            Span::Check => "after this check",
            Span::AfterChecks => "at the end of the run",
        }
    }
}

/// The error counters last read, by GPU index: the inventory's at the start, then each reading
/// after a check that ran on the GPUs and the one after the last check, counter by counter (one
/// a reading missed keeps its last known value). What grew is judged against it, so each error
/// is filed under the check it was counted in (or the closing reading's record), and under no
/// later one.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    last: Vec<Option<ErrorCounts>>,
    /// The readings the inventory found not available, by GPU index: not judged later either.
    hidden: Vec<Vec<Reading>>,
}

impl Watch {
    /// The counters as the inventory read them.
    pub fn start(inv: &Inventory) -> Watch {
        let n = inv.gpus.iter().map(|g| g.index + 1).max().unwrap_or(0);
        let mut w = Watch {
            last: vec![None; n],
            hidden: vec![Vec::new(); n],
        };
        for g in &inv.gpus {
            w.last[g.index] = Some(ErrorCounts::of(g));
            w.hidden[g.index] = g.unavailable.clone();
        }
        w
    }

    /// The GPUs whose XIDs the inventory could read and `now` (a reading of them, by GPU index)
    /// could not (the event set failed mid-run, and the kernel log cannot be read): not
    /// available here, so what was raised in `span` is not taken for nothing.
    fn xids_lost(&self, now: &[Option<Vec<XidEvent>>], span: Span) -> Vec<Finding> {
        let mut out = Vec::new();
        for (gpu, hidden) in self.hidden.iter().enumerate() {
            let known = self.last.get(gpu).is_some_and(Option::is_some);
            if !known || hidden.contains(&Reading::Xids) || matches!(now.get(gpu), Some(Some(_))) {
                continue;
            }
            out.push(
                finding(
                    Status::Skip,
                    Subject::gpu(gpu),
                    "not available here",
                    format!("read {}", span.read()),
                    format!(
                        "not available here: XID events of GPU {gpu} {}: what was raised {} is \
                         not judged",
                        span.read(),
                        span.when()
                    ),
                )
                .on(METRIC),
            );
        }
        out
    }

    /// Judge `now` against the last reading, then keep what it read as the last.
    fn take(&mut self, now: Vec<Option<ErrorCounts>>, h: &HealthCheck, span: Span) -> Vec<Finding> {
        let now: Vec<Option<ErrorCounts>> = now
            .into_iter()
            .zip(&self.hidden)
            .map(|(c, hidden)| c.map(|c| c.without(hidden)))
            .collect();
        let out = counter_findings(&self.last, &now, h, span);
        // A GPU beyond the inventory's is never compared; one it listed without a reading is
        // from its first reading on.
        for (last, c) in self.last.iter_mut().zip(now) {
            match (last.as_mut(), c) {
                (Some(l), Some(c)) => l.update(c),
                (None, Some(c)) => *last = Some(c),
                (_, None) => {}
            }
        }
        out
    }
}

/// How a reading counts errors that several of its counters count: the largest (the same
/// errors counted twice, as the uncorrectable ECC counts) or the sum (an NVLink's kinds).
#[derive(Clone, Copy)]
enum Total {
    Largest,
    Sum,
}

/// The finding on counters of one reading (`pairs`: each counter before and now) where one read
/// at both ends grew: how many more were counted, and the total now as the health check counts
/// it, judged against `limit` (beyond it fails; within it is shown, not judged). A counter that
/// fell (reset with the driver, or a link retrained) adds nothing, and takes nothing from
/// another's growth.
fn grew(
    sub: &Subject,
    r: Reading,
    what: &str,
    pairs: &[(Option<u64>, Option<u64>)],
    total: Total,
    limit: u64,
    span: Span,
) -> Option<Finding> {
    let deltas = pairs
        .iter()
        .filter_map(|(b, n)| b.zip(*n))
        .map(|(b, n)| n.saturating_sub(b));
    let more = match total {
        Total::Largest => deltas.max().unwrap_or(0),
        Total::Sum => deltas.fold(0, u64::saturating_add),
    };
    if more == 0 {
        return None;
    }
    let now = pairs.iter().filter_map(|(_, n)| *n);
    let now = match total {
        Total::Largest => now.max().unwrap_or(0),
        Total::Sum => now.fold(0, u64::saturating_add),
    };
    let who = sub.describe();
    let found = format!("{now} {what} (+{more} {})", span.during());
    let rose = format!("{who}: {what} rose by {more} {}, to {now}", span.when());
    let f = if now > limit {
        finding(
            Status::Fail,
            sub.clone(),
            found,
            format!("<= {limit}"),
            format!("{rose}, beyond the limit of {limit}"),
        )
    } else {
        finding(
            Status::Pass,
            sub.clone(),
            found,
            "shown, not judged",
            format!("{rose}, within the limit of {limit}"),
        )
        .informational()
    };
    Some(f.on(r.key()))
}

/// A flag that was clear at the last reading and is set now: its finding (`fails`: the suite
/// fails a GPU with it set; otherwise `status`).
fn raised(
    sub: &Subject,
    (before, now): (Option<bool>, Option<bool>),
    fails: bool,
    status: Status,
    found: &str,
    reason: &str,
    span: Span,
) -> Option<Finding> {
    if before? || !now? {
        return None;
    }
    let status = if fails { Status::Fail } else { status };
    let f = finding(
        status,
        sub.clone(),
        found,
        format!("no {found}"),
        match span {
            Span::Check => format!("{}: {reason} while this check ran", sub.describe()),
            Span::AfterChecks => format!("{}: {}, {reason}", sub.describe(), span.when()),
        },
    )
    .on(Reading::RemappedRows.key());
    Some(match status {
        Status::Pass => f.informational(),
        _ => f,
    })
}

/// The counters `b` read and `n` did not, by reading: what was counted between the two readings
/// is not known for them.
fn unread_now(b: &ErrorCounts, n: &ErrorCounts) -> Vec<(Reading, Vec<String>)> {
    let lost = |b: Option<u64>, n: Option<u64>| b.is_some() && n.is_none();
    let named = |list: &[(&str, bool)]| -> Vec<String> {
        list.iter()
            .filter(|(_, l)| *l)
            .map(|(n, _)| n.to_string())
            .collect()
    };
    let (eb, en) = (&b.ecc, &n.ecc);
    let mut out = vec![
        (
            Reading::EccErrors,
            named(&[
                (
                    "uncorrectable ECC count (volatile)",
                    lost(eb.volatile_uncorrected, en.volatile_uncorrected),
                ),
                (
                    "SRAM uncorrectable count",
                    lost(eb.sram_uncorrected, en.sram_uncorrected),
                ),
                (
                    "SRAM correctable count",
                    lost(eb.sram_corrected, en.sram_corrected),
                ),
                ("DRAM error count", lost(eb.dram_errors, en.dram_errors)),
            ]),
        ),
        (
            Reading::RemappedRows,
            named(&[
                (
                    "remapped rows",
                    b.remapped_rows.is_some() && n.remapped_rows.is_none(),
                ),
                (
                    "retired pages",
                    b.retired_pages.is_some() && n.retired_pages.is_none(),
                ),
            ]),
        ),
        (
            Reading::PcieReplays,
            named(&[("PCIe replay counter", lost(b.pcie_replays, n.pcie_replays))]),
        ),
    ];
    let mut links = Vec::new();
    // A link found down is judged as such, not as counters unread.
    for (link, lb) in b.nvlinks.iter().filter(|(l, _)| !n.links_down.contains(l)) {
        let ln = n.nvlinks.iter().find(|(l, _)| l == link).map(|(_, e)| e);
        let gone: Vec<&str> = [
            ("replay", lb.replay, ln.and_then(|e| e.replay)),
            ("recovery", lb.recovery, ln.and_then(|e| e.recovery)),
            ("crc_flit", lb.crc_flit, ln.and_then(|e| e.crc_flit)),
            ("crc_data", lb.crc_data, ln.and_then(|e| e.crc_data)),
            ("ecc_data", lb.ecc_data, ln.and_then(|e| e.ecc_data)),
        ]
        .into_iter()
        .filter(|(_, b, n)| lost(*b, *n))
        .map(|(name, _, _)| name)
        .collect();
        if !gone.is_empty() {
            links.push(format!("link {link}'s {}", gone.join(", ")));
        }
    }
    out.push((Reading::NvlinkErrors, links));
    out.retain(|(_, names)| !names.is_empty());
    out
}

/// The findings on the counters read now (`now`, by GPU index) that grew since `before`, held to
/// the health check's limits; and on those read before and not now (a GPU that stopped
/// answering, a query that failed): not available here, so the check (or the closing reading's
/// record, `span`) is partial, not a pass of what they would have counted.
pub fn counter_findings(
    before: &[Option<ErrorCounts>],
    now: &[Option<ErrorCounts>],
    h: &HealthCheck,
    span: Span,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (gpu, (b, n)) in before.iter().zip(now).enumerate() {
        let Some(b) = b else {
            continue;
        };
        let sub = Subject::gpu(gpu);
        let who = sub.describe();
        let n = match n {
            Some(n) => n,
            None => &ErrorCounts::default(),
        };
        for (r, names) in unread_now(b, n) {
            out.push(
                finding(
                    Status::Skip,
                    sub.clone(),
                    "not available here",
                    format!("read {}", span.read()),
                    format!(
                        "not available here: {} of {who} {}: what was counted {} is not judged",
                        names.join(", "),
                        match span {
                            Span::Check => "after this check (read before it)",
                            Span::AfterChecks => "at the end of the run (read at the last reading)",
                        },
                        match span {
                            Span::Check => "while it ran",
                            Span::AfterChecks => "since",
                        }
                    ),
                )
                .on(r.key()),
            );
        }
        let (eb, en) = (&b.ecc, &n.ecc);
        out.extend(
            [
                grew(
                    &sub,
                    Reading::EccErrors,
                    "uncorrectable ECC errors",
                    &[
                        (eb.volatile_uncorrected, en.volatile_uncorrected),
                        (eb.sram_uncorrected, en.sram_uncorrected),
                    ],
                    Total::Largest,
                    h.max_uncorrectable,
                    span,
                ),
                grew(
                    &sub,
                    Reading::EccErrors,
                    "SRAM correctable errors",
                    &[(eb.sram_corrected, en.sram_corrected)],
                    Total::Largest,
                    h.max_sram_correctable,
                    span,
                ),
                grew(
                    &sub,
                    Reading::EccErrors,
                    "DRAM errors",
                    &[(eb.dram_errors, en.dram_errors)],
                    Total::Largest,
                    h.max_dram_errors,
                    span,
                ),
                raised(
                    &sub,
                    (
                        b.remapped_rows.as_ref().map(|r| r.pending),
                        n.remapped_rows.as_ref().map(|r| r.pending),
                    ),
                    h.fail_on_remap_pending,
                    Status::Pass,
                    "remap pending",
                    "a row remap became pending (the GPU must be reset before use)",
                    span,
                ),
                raised(
                    &sub,
                    (
                        b.remapped_rows.as_ref().map(|r| r.failure),
                        n.remapped_rows.as_ref().map(|r| r.failure),
                    ),
                    h.fail_on_remap_failure,
                    Status::Pass,
                    "remap failed",
                    "a row remap failed (the GPU is out of spare rows)",
                    span,
                ),
                raised(
                    &sub,
                    (
                        b.retired_pages.as_ref().map(|r| r.pending),
                        n.retired_pages.as_ref().map(|r| r.pending),
                    ),
                    false,
                    Status::Warn,
                    "page retirement pending",
                    "a page retirement became pending (reset needed)",
                    span,
                ),
                grew(
                    &sub,
                    Reading::PcieReplays,
                    "PCIe replays",
                    &[(b.pcie_replays, n.pcie_replays)],
                    Total::Largest,
                    h.max_pcie_replays,
                    span,
                ),
            ]
            .into_iter()
            .flatten(),
        );
        // A link active at the last reading and inactive now went down while the check ran:
        // a fault of the link (its bandwidth lost, or traffic moved onto the others), whatever
        // the check's own figures say.
        for (link, _) in b.nvlinks.iter().filter(|(l, _)| n.links_down.contains(l)) {
            let sub = Subject::link(gpu, *link);
            out.push(
                finding(
                    Status::Fail,
                    sub.clone(),
                    "went down",
                    "active, as when last read",
                    match span {
                        Span::Check => format!(
                            "{}: NVLink went down while this check ran (it was active when last \
                             read)",
                            sub.describe()
                        ),
                        Span::AfterChecks => {
                            format!("{}: NVLink went down {}", sub.describe(), span.when())
                        }
                    },
                )
                .on(Reading::NvlinkErrors.key()),
            );
        }
        for (link, ln) in &n.nvlinks {
            let Some((_, lb)) = b.nvlinks.iter().find(|(l, _)| l == link) else {
                continue;
            };
            // Each kind compared on its own, the total summed as the health check sums it. The
            // data errors are compared only where both readings count them by one counter: a
            // link that answered the CRC count before and not now (its ECC count in its place)
            // has no growth to tell; its total now is still counted.
            let before = match lb.crc_data.is_some() == ln.crc_data.is_some() {
                true => lb.clone(),
                false => NvLinkErrors {
                    crc_data: None,
                    ecc_data: None,
                    ..lb.clone()
                },
            };
            let pairs: Vec<(Option<u64>, Option<u64>)> = before
                .kinds()
                .iter()
                .zip(ln.kinds())
                .map(|((_, b), (_, n))| (*b, n))
                .collect();
            out.extend(grew(
                &Subject::link(gpu, *link),
                Reading::NvlinkErrors,
                ln.words(),
                &pairs,
                Total::Sum,
                h.max_nvlink_errors,
                span,
            ));
        }
    }
    out
}

/// The findings on `now`, the XIDs each GPU raised in `span` (by GPU index), held to
/// `fail_xids`.
pub fn findings(now: &[Option<Vec<XidEvent>>], fail_xids: &[u32], span: Span) -> Vec<Finding> {
    let mut out = Vec::new();
    for (gpu, events) in now.iter().enumerate() {
        for x in events.iter().flatten() {
            let fatal = fail_xids.contains(&x.code);
            out.push(
                finding(
                    if fatal { Status::Fail } else { Status::Warn },
                    Subject::gpu(gpu),
                    format!("XID {}", x.code),
                    "no XID",
                    format!(
                        "GPU {gpu}: XID {} ({}) raised {}{}",
                        x.code,
                        x.source,
                        span.when(),
                        if fatal { ", which fails a node" } else { "" }
                    ),
                )
                .on(METRIC),
            );
        }
    }
    out
}

/// Why `findings` of a check must not be measured again, where they fail on an XID raised or an
/// error counted while it ran: a fault of the GPU, which the check measured again would not see
/// again (each event is told once, and a counter is compared with its last reading).
pub fn failed_under_load(findings: &[Finding]) -> Option<&'static str> {
    let failed = |metric: &str| {
        findings
            .iter()
            .any(|f| f.status == Status::Fail && f.metric.as_deref() == Some(metric))
    };
    if failed(METRIC) {
        return Some("an XID raised under load is never re-measured away");
    }
    let counters = [
        Reading::EccErrors,
        Reading::RemappedRows,
        Reading::PcieReplays,
        Reading::NvlinkErrors,
    ];
    counters
        .iter()
        .any(|r| failed(r.key()))
        .then_some("an error counted under load is never re-measured away")
}

/// The XIDs raised since the last reading and the error counters that grew since, judged
/// (nothing where the suite has no health check, or where a call of the check's may be stuck
/// in the driver).
pub fn after_check(ctx: &Ctx, backend: &mut dyn Backend, watch: &mut Watch) -> Vec<Finding> {
    read(&ctx.suite.checks, backend, watch, Span::Check)
}

/// The reading after the last check: the XIDs raised and the counters that grew since the last
/// reading (after the last check that ran on the GPUs, or the node's reading where none ran or
/// the last gave no figures), judged as after a check, and filed under a record of their own
/// ([`crate::evidence::CLOSING_RECORD`]). An XID that reaches the kernel log a moment after the
/// training run's reading, or one raised while the network check runs, is not left out of the
/// verdict. `None` where it finds nothing to judge (a counter that grew within its limit alone
/// is not a judgement), or reads nothing (no health check, a backend that cannot read them, a
/// CUDA call still stuck). The runner does not call it after a call timed out.
pub fn closing_reading(
    checks: &crate::suite::Checks,
    backend: &mut dyn Backend,
    watch: &mut Watch,
) -> Option<crate::evidence::CheckRecord> {
    let started_at = chrono::Utc::now();
    let t0 = std::time::Instant::now();
    let findings = read(checks, backend, watch, Span::AfterChecks);
    // Only what was judged, or could not be: a record of information alone would read as a
    // skipped check.
    if findings.iter().all(|f| f.info) {
        return None;
    }
    let (status, summary, coverage) = crate::runner::summarize_with_coverage(&findings);
    Some(crate::evidence::CheckRecord {
        id: crate::evidence::CLOSING_RECORD.into(),
        kind: "watch".into(),
        title: "XIDs, counters after the checks".into(),
        status,
        summary,
        plan: vec![],
        metrics: vec![],
        facts: vec![],
        findings,
        coverage,
        started_at,
        duration_s: t0.elapsed().as_secs_f64(),
        unjudged: None,
        remeasure: None,
    })
}

/// Read the XIDs raised and the counters grown since the last reading, and judge them as the
/// health check of `checks` judges them; nothing where it has none.
fn read(
    checks: &crate::suite::Checks,
    backend: &mut dyn Backend,
    watch: &mut Watch,
    span: Span,
) -> Vec<Finding> {
    if crate::backend::cuda::thread_abandoned() {
        return Vec::new();
    }
    let Some(h) = checks.health.as_ref().filter(|h| h.enabled) else {
        return Vec::new();
    };
    let mut out = match backend.xids_since() {
        Ok(now) => {
            let mut out = watch.xids_lost(&now, span);
            out.extend(findings(&now, &h.fail_xids, span));
            out
        }
        Err(_) => Vec::new(),
    };
    if let Ok(now) = backend.error_counts() {
        out.extend(watch.take(now, h, span));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters' findings as after a check.
    fn counter_findings(
        before: &[Option<ErrorCounts>],
        now: &[Option<ErrorCounts>],
        h: &HealthCheck,
    ) -> Vec<Finding> {
        super::counter_findings(before, now, h, Span::Check)
    }

    fn xid(code: u32) -> XidEvent {
        XidEvent {
            code,
            source: "nvml event".into(),
            detail: None,
            age_s: Some(0.0),
        }
    }

    /// An XID in the suite's list fails, another warns, each named by GPU; a GPU not read, or
    /// with none, says nothing.
    #[test]
    fn xids_raised_during_a_check_are_judged_as_health_judges_them() {
        let now = vec![Some(vec![]), None, Some(vec![xid(48), xid(31)])];
        let f = findings(&now, &[48, 79], Span::Check);
        assert_eq!(f.len(), 2, "{f:#?}");
        assert_eq!((f[0].status, f[0].subject.gpu), (Status::Fail, Some(2)));
        assert_eq!(
            f[0].reason,
            "GPU 2: XID 48 (nvml event) raised while this check ran, which fails a node"
        );
        assert_eq!((f[1].status, f[1].subject.gpu), (Status::Warn, Some(2)));
        assert_eq!(
            f[1].reason,
            "GPU 2: XID 31 (nvml event) raised while this check ran"
        );
        assert!(f.iter().all(|x| x.metric.as_deref() == Some("xids")));
        assert!(findings(&now[..2], &[48], Span::Check).is_empty());
        assert!(failed_under_load(&f).is_some());
        assert!(failed_under_load(&f[1..]).is_none());
    }

    fn health() -> HealthCheck {
        toml::from_str("").unwrap()
    }

    /// Counters as a healthy GPU reads them: everything read, nothing counted, one NVLink.
    fn clean() -> ErrorCounts {
        use crate::inventory::{EccCounts, NvLinkErrors, RemappedRows, RetiredPages};
        ErrorCounts {
            ecc: EccCounts {
                volatile_corrected: Some(0),
                volatile_uncorrected: Some(0),
                aggregate_corrected: Some(0),
                aggregate_uncorrected: Some(0),
                sram_corrected: Some(0),
                sram_uncorrected: Some(0),
                dram_errors: Some(0),
            },
            remapped_rows: Some(RemappedRows::default()),
            retired_pages: Some(RetiredPages::default()),
            pcie_replays: Some(0),
            nvlinks: vec![(
                4,
                NvLinkErrors {
                    replay: Some(0),
                    recovery: Some(0),
                    crc_flit: Some(0),
                    crc_data: Some(0),
                    ecc_data: None,
                },
            )],
            links_down: vec![],
        }
    }

    /// The findings on GPU 1 after `edit` changed its counters from [`clean`] (GPU 0 read
    /// clean at both ends), held to the default limits changed by `cfg`.
    fn after(
        edit: impl FnOnce(&mut ErrorCounts),
        cfg: impl FnOnce(&mut HealthCheck),
    ) -> Vec<Finding> {
        let mut n = clean();
        edit(&mut n);
        let mut h = health();
        cfg(&mut h);
        let f = counter_findings(
            &[Some(clean()), Some(clean())],
            &[Some(clean()), Some(n)],
            &h,
        );
        assert!(f.iter().all(|x| x.subject.gpu == Some(1)), "{f:#?}");
        f
    }

    /// The closing reading judges as after a check and says when: since the last reading,
    /// before the run ended (the figures "after the checks", a counter not read then "at the
    /// end of the run").
    #[test]
    fn the_closing_reading_says_its_findings_came_after_the_checks() {
        let f = findings(&[Some(vec![xid(79)])], &[79], Span::AfterChecks);
        assert_eq!(
            brief(&f),
            [(
                Status::Fail,
                false,
                "GPU 0: XID 79 (nvml event) raised since the last reading, before the run \
                 ended, which fails a node"
                    .to_string()
            )]
        );
        let mut n = clean();
        n.ecc.volatile_uncorrected = Some(1);
        n.remapped_rows.as_mut().unwrap().pending = true;
        n.pcie_replays = None;
        n.nvlinks.clear();
        n.links_down = vec![4];
        let f = super::counter_findings(&[Some(clean())], &[Some(n)], &health(), Span::AfterChecks);
        assert_eq!(
            brief(&f),
            [
                (
                    Status::Skip,
                    false,
                    "not available here: PCIe replay counter of GPU 0 at the end of the run \
                     (read at the last reading): what was counted since is not judged"
                        .to_string()
                ),
                (
                    Status::Fail,
                    false,
                    "GPU 0: uncorrectable ECC errors rose by 1 since the last reading, before \
                     the run ended, to 1, beyond the limit of 0"
                        .to_string()
                ),
                (
                    Status::Fail,
                    false,
                    "GPU 0: since the last reading, before the run ended, a row remap became \
                     pending (the GPU must be reset before use)"
                        .to_string()
                ),
                (
                    Status::Fail,
                    false,
                    "GPU 0 link 4: NVLink went down since the last reading, before the run \
                     ended"
                        .to_string()
                ),
            ]
        );
        assert_eq!(
            f[1].found,
            "1 uncorrectable ECC errors (+1 after the checks)"
        );
        assert_eq!(f[0].expected, "read at the end of the run");
    }

    fn brief(f: &[Finding]) -> Vec<(Status, bool, String)> {
        f.iter()
            .map(|x| (x.status, x.info, x.reason.clone()))
            .collect()
    }

    /// A counter that grew beyond the health check's limit fails, naming how far it rose and
    /// where it stands; one that grew within it is shown, not judged; one that stood still, or
    /// that has no limit, says nothing.
    #[test]
    fn counters_that_grew_are_judged_against_the_health_limits() {
        assert!(after(|_| {}, |_| {}).is_empty());
        let f = after(|c| c.ecc.volatile_uncorrected = Some(1), |_| {});
        assert_eq!(
            brief(&f),
            [(
                Status::Fail,
                false,
                "GPU 1: uncorrectable ECC errors rose by 1 while this check ran, to 1, beyond the \
                 limit of 0"
                    .into()
            )]
        );
        assert_eq!(
            (f[0].found.as_str(), f[0].expected.as_str()),
            ("1 uncorrectable ECC errors (+1 during this check)", "<= 0")
        );
        assert_eq!(f[0].metric.as_deref(), Some("ecc_errors"));
        // The SRAM count of the same errors: one finding, of the larger count and growth.
        let f = after(
            |c| {
                c.ecc.volatile_uncorrected = Some(1);
                c.ecc.sram_uncorrected = Some(2);
            },
            |h| h.max_uncorrectable = 1,
        );
        assert_eq!(brief(&f).len(), 1, "{f:#?}");
        assert!(
            f[0].reason.contains("rose by 2 while this check ran, to 2"),
            "{}",
            f[0].reason
        );
        assert_eq!(f[0].status, Status::Fail);
        // Within the limit: shown, not judged.
        let f = after(
            |c| c.ecc.volatile_uncorrected = Some(1),
            |h| h.max_uncorrectable = 1,
        );
        assert_eq!(
            brief(&f),
            [(
                Status::Pass,
                true,
                "GPU 1: uncorrectable ECC errors rose by 1 while this check ran, to 1, within the \
                 limit of 1"
                    .into()
            )]
        );
        // At the limit exactly is within it.
        let f = after(|c| c.pcie_replays = Some(80), |_| {});
        assert_eq!((f[0].status, f[0].info), (Status::Pass, true));
        let f = after(|c| c.pcie_replays = Some(81), |_| {});
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].metric.as_deref(), Some("pcie_replays"));
        assert!(f[0]
            .reason
            .starts_with("GPU 1: PCIe replays rose by 81 while this check ran, to 81"));
        for (edit, limit, what) in [
            (
                (|c: &mut ErrorCounts| c.ecc.sram_corrected = Some(10_001)) as fn(&mut ErrorCounts),
                "10000",
                "SRAM correctable errors",
            ),
            (
                |c| c.ecc.dram_errors = Some(20_000_001),
                "20000000",
                "DRAM errors",
            ),
        ] {
            let f = after(edit, |_| {});
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!(f[0].status, Status::Fail);
            assert!(
                f[0].reason.contains(what) && f[0].reason.ends_with(limit),
                "{}",
                f[0].reason
            );
        }
        // Counters with no limit (volatile and lifetime corrected) are not judged.
        assert!(after(
            |c| {
                c.ecc.volatile_corrected = Some(9);
                c.ecc.aggregate_corrected = Some(9);
            },
            |_| {}
        )
        .is_empty());
    }

    /// A new uncorrectable error is seen where one count of it grew though the larger count
    /// stood still (the SRAM lifetime count above the volatile one): the total is the health
    /// check's, the larger, and the growth is the count's that grew.
    #[test]
    fn an_uncorrectable_error_is_seen_where_the_larger_count_stood_still() {
        let mut b = clean();
        b.ecc.sram_uncorrected = Some(2);
        let mut n = b.clone();
        n.ecc.volatile_uncorrected = Some(1);
        let mut h = health();
        h.max_uncorrectable = 2;
        let f = counter_findings(&[Some(b.clone())], &[Some(n.clone())], &h);
        assert_eq!(
            brief(&f),
            [(
                Status::Pass,
                true,
                "GPU 0: uncorrectable ECC errors rose by 1 while this check ran, to 2, within the \
                 limit of 2"
                    .into()
            )]
        );
        h.max_uncorrectable = 1;
        let f = counter_findings(&[Some(b)], &[Some(n)], &h);
        assert_eq!(f[0].status, Status::Fail);
    }

    /// A counter not compared (not read before, or that fell, as the volatile counts after a
    /// driver reload) says nothing; one read before and not now is not available here, so the
    /// check is partial, and a GPU not read at all now says so of each reading.
    #[test]
    fn a_counter_read_before_and_not_now_is_not_available_here() {
        let mut unread = clean();
        unread.pcie_replays = None;
        unread.ecc = Default::default();
        let mut grown = clean();
        grown.pcie_replays = Some(500);
        grown.ecc.volatile_uncorrected = Some(3);
        let h = health();
        assert!(counter_findings(&[Some(unread.clone())], &[Some(grown.clone())], &h).is_empty());
        assert!(counter_findings(&[None], &[Some(grown.clone())], &h).is_empty());
        assert!(counter_findings(&[Some(grown.clone())], &[Some(clean())], &h).is_empty());
        let f = counter_findings(&[Some(grown.clone())], &[Some(unread)], &h);
        assert_eq!(
            brief(&f),
            [
                (
                    Status::Skip,
                    false,
                    "not available here: uncorrectable ECC count (volatile), SRAM uncorrectable \
                     count, SRAM correctable count, DRAM error count of GPU 0 after this check \
                     (read before it): what was counted while it ran is not judged"
                        .into()
                ),
                (
                    Status::Skip,
                    false,
                    "not available here: PCIe replay counter of GPU 0 after this check (read \
                     before it): what was counted while it ran is not judged"
                        .into()
                ),
            ]
        );
        assert_eq!(f[0].metric.as_deref(), Some("ecc_errors"));
        let f = counter_findings(&[Some(clean())], &[None], &h);
        let what: Vec<&str> = f.iter().map(|x| x.metric.as_deref().unwrap()).collect();
        assert_eq!(
            what,
            [
                "ecc_errors",
                "remapped_rows",
                "pcie_replays",
                "nvlink_errors"
            ]
        );
        assert!(f.iter().all(|x| x.status == Status::Skip && !x.info));
        assert!(f[1]
            .reason
            .starts_with("not available here: remapped rows, retired pages of GPU 0"));
        assert!(f[3].reason.starts_with(
            "not available here: link 4's replay, recovery, crc_flit, crc_data of GPU 0"
        ));
    }

    /// A remap that became pending or failed fails where the suite fails one (and is shown
    /// where it does not); a page retirement that became pending warns; one set at the start
    /// is the health check's, not this check's.
    #[test]
    fn remaps_and_retirements_raised_under_load_are_judged_as_health_judges_them() {
        let pending = |c: &mut ErrorCounts| c.remapped_rows.as_mut().unwrap().pending = true;
        let f = after(pending, |_| {});
        assert_eq!(
            brief(&f),
            [(
                Status::Fail,
                false,
                "GPU 1: a row remap became pending (the GPU must be reset before use) while this \
                 check ran"
                    .into()
            )]
        );
        assert_eq!(f[0].metric.as_deref(), Some("remapped_rows"));
        let f = after(pending, |h| h.fail_on_remap_pending = false);
        assert_eq!((f[0].status, f[0].info), (Status::Pass, true));
        let failed = |c: &mut ErrorCounts| c.remapped_rows.as_mut().unwrap().failure = true;
        let f = after(failed, |_| {});
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].reason.contains("a row remap failed"),
            "{}",
            f[0].reason
        );
        let f = after(failed, |h| h.fail_on_remap_failure = false);
        assert_eq!((f[0].status, f[0].info), (Status::Pass, true));
        let f = after(|c| c.retired_pages.as_mut().unwrap().pending = true, |_| {});
        assert_eq!(f[0].status, Status::Warn);
        assert!(f[0].reason.contains("page retirement became pending"));
        // Pending at both ends: not raised by this check.
        let mut was = clean();
        pending(&mut was);
        assert!(counter_findings(&[Some(was.clone())], &[Some(was)], &health()).is_empty());
    }

    /// An NVLink's errors are compared kind by kind and summed as the health check sums them,
    /// per link: a kind that fell (a link retrained) takes nothing from another's growth; a
    /// link not read at the start is not compared.
    #[test]
    fn nvlink_errors_that_grew_are_judged_per_link() {
        let f = after(
            |c| {
                let e = &mut c.nvlinks[0].1;
                e.crc_flit = Some(60);
                e.replay = Some(41);
            },
            |_| {},
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].status, f[0].subject.link), (Status::Fail, Some(4)));
        assert_eq!(
            f[0].reason,
            "GPU 1 link 4: NVLink errors (replay, recovery, CRC) rose by 101 while this check \
             ran, to 101, beyond the limit of 100"
        );
        assert_eq!(f[0].metric.as_deref(), Some("nvlink_errors"));
        let f = after(|c| c.nvlinks[0].1.crc_data = Some(100), |_| {});
        assert_eq!((f[0].status, f[0].info), (Status::Pass, true));
        // Data errors counted by ECC (NVLink 4, which does not answer the CRC count) are
        // compared and summed with the rest.
        let hopper = |ecc: u64| {
            let mut c = clean();
            c.nvlinks[0].1.crc_data = None;
            c.nvlinks[0].1.ecc_data = Some(ecc);
            c
        };
        let f = counter_findings(&[Some(hopper(0))], &[Some(hopper(101))], &health());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(
            f[0].reason.contains(
                "NVLink errors (replay, recovery, flit CRC, data ECC) rose by 101 while this \
                 check ran, to 101"
            ),
            "{}",
            f[0].reason
        );
        // A link that answers both counts its data errors once, by CRC.
        let f = after(
            |c| {
                let e = &mut c.nvlinks[0].1;
                e.crc_data = Some(60);
                e.ecc_data = Some(60);
            },
            |_| {},
        );
        assert!(
            f[0].reason
                .contains("rose by 60 while this check ran, to 60, within"),
            "{}",
            f[0].reason
        );
        // Replay reset from 90 to 0 while CRC rose by 60: 60 more, 60 in all.
        let mut b = clean();
        b.nvlinks[0].1.replay = Some(90);
        let mut n = clean();
        n.nvlinks[0].1.crc_flit = Some(60);
        let f = counter_findings(&[Some(b)], &[Some(n.clone())], &health());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].reason
                .contains("rose by 60 while this check ran, to 60, within"),
            "{}",
            f[0].reason
        );
        // A counter read now only is counted in the total, not in the growth.
        let mut b = clean();
        b.nvlinks[0].1.crc_flit = None;
        let mut n = clean();
        n.nvlinks[0].1.crc_flit = Some(1000);
        assert!(counter_findings(&[Some(b)], &[Some(n.clone())], &health()).is_empty());
        n.nvlinks[0].1.replay = Some(1);
        let mut b = clean();
        b.nvlinks[0].1.crc_flit = None;
        let f = counter_findings(&[Some(b)], &[Some(n.clone())], &health());
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(
            f[0].reason
                .contains("rose by 1 while this check ran, to 1001"),
            "{}",
            f[0].reason
        );
        // Another link number, or none read at the start: nothing to compare (the link read at
        // the start and not now is not available).
        n.nvlinks[0].0 = 5;
        let f = counter_findings(&[Some(clean())], &[Some(n)], &health());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Skip);
    }

    /// A GPU whose XIDs the inventory could read and a later reading could not (its event set
    /// failed and the kernel log cannot be read) is not available here for that span, each time;
    /// one the inventory could not read either is the health check's to say, and one read is
    /// nothing to say.
    #[test]
    fn xids_that_could_be_read_at_the_start_and_not_now_are_not_available() {
        let mut inv: Inventory = crate::testutil::simulated("h100-sxm-8", &[]).node;
        inv.gpus.truncate(3);
        inv.gpus[1].unavailable.push(Reading::Xids);
        let w = Watch::start(&inv);
        let now = vec![Some(vec![]), None, None];
        let f = w.xids_lost(&now, Span::Check);
        assert_eq!(
            brief(&f),
            [(
                Status::Skip,
                false,
                "not available here: XID events of GPU 2 after this check: what was raised while \
                 this check ran is not judged"
                    .to_string()
            )]
        );
        assert_eq!(
            (f[0].subject.gpu, f[0].metric.as_deref()),
            (Some(2), Some("xids"))
        );
        let f = w.xids_lost(&now[..2], Span::AfterChecks);
        assert_eq!(
            brief(&f)[0].2,
            "not available here: XID events of GPU 2 at the end of the run: what was raised \
             since the last reading, before the run ended is not judged"
        );
        assert!(w
            .xids_lost(&[Some(vec![]), None, Some(vec![])], Span::Check)
            .is_empty());
    }

    /// Each reading is judged against the last known values: an error is filed under the check
    /// it was counted in and no later one; a counter a reading missed keeps its last value for
    /// the next (so what it counted meanwhile is seen there); a reading the inventory found not
    /// available is never judged.
    #[test]
    fn the_watch_files_an_error_once_under_the_check_that_counted_it() {
        let mut inv: Inventory = crate::testutil::simulated("h100-sxm-8", &[]).node;
        inv.gpus[5].unavailable.push(Reading::RemappedRows);
        let mut w = Watch::start(&inv);
        let h = health();
        let mut grown = w.last.clone();
        grown[2].as_mut().unwrap().pcie_replays = Some(90);
        assert_eq!(w.take(grown.clone(), &h, Span::Check).len(), 1);
        assert!(w.take(grown.clone(), &h, Span::Check).is_empty());
        // GPU 2's replay counter not read this time: said, and its last value (90) stands.
        let mut gap = grown.clone();
        gap[2].as_mut().unwrap().pcie_replays = None;
        let f = w.take(gap, &h, Span::Check);
        assert_eq!((f.len(), f[0].status), (1, Status::Skip), "{f:#?}");
        grown[2].as_mut().unwrap().pcie_replays = Some(95);
        let f = w.take(grown.clone(), &h, Span::Check);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].reason
                .contains("rose by 5 while this check ran, to 95"),
            "{}",
            f[0].reason
        );
        // A whole GPU not read: each of its readings said, its values kept.
        let mut none = grown.clone();
        none[3] = None;
        assert_eq!(w.take(none, &h, Span::Check).len(), 4);
        assert!(w.take(grown.clone(), &h, Span::Check).is_empty());
        // GPU 5's remap, not available at the start, is not judged when a reading answers it.
        let mut remap = grown.clone();
        let g5 = remap[5].as_mut().unwrap();
        assert_eq!(g5.remapped_rows, None);
        g5.remapped_rows = Some(crate::inventory::RemappedRows {
            pending: true,
            ..Default::default()
        });
        assert!(w.take(remap, &h, Span::Check).is_empty());
    }

    /// An NVLink active at the last reading and found inactive now fails under the check it
    /// went down in (not "not available here", as an unread counter would be), once: the next
    /// reading compares the links still up, and one that comes back is compared again.
    #[test]
    fn a_link_that_goes_down_under_load_fails_once() {
        let down = |c: &mut ErrorCounts| {
            c.nvlinks.clear();
            c.links_down = vec![4];
        };
        let f = after(down, |_| {});
        assert_eq!(
            brief(&f),
            [(
                Status::Fail,
                false,
                "GPU 1 link 4: NVLink went down while this check ran (it was active when last \
                 read)"
                    .to_string()
            )]
        );
        assert_eq!(f[0].metric.as_deref(), Some("nvlink_errors"));
        assert!(failed_under_load(&f).is_some());
        // A link down already at the last reading is topology's matter, not a new fault.
        let mut b = clean();
        down(&mut b);
        let mut n = clean();
        down(&mut n);
        assert!(counter_findings(&[Some(b)], &[Some(n)], &health()).is_empty());
        // Through the watch: failed once, then nothing while it stays down; back up, compared.
        let mut inv: Inventory = crate::testutil::simulated("h100-sxm-8", &[]).node;
        inv.gpus.truncate(1);
        let mut w = Watch::start(&inv);
        let h = health();
        let first = w.last[0].as_ref().unwrap().nvlinks[0].0;
        let mut now = w.last.clone();
        let g = now[0].as_mut().unwrap();
        let (_, errs) = g.nvlinks.remove(0);
        g.links_down.push(first);
        let f = w.take(now.clone(), &h, Span::Check);
        assert_eq!((f.len(), f[0].status), (1, Status::Fail), "{f:#?}");
        assert!(w.take(now.clone(), &h, Span::Check).is_empty());
        let g = now[0].as_mut().unwrap();
        g.links_down.clear();
        let mut more = errs.clone();
        more.replay = more.replay.map(|r| r + 500);
        g.nvlinks.insert(0, (first, more.clone()));
        assert!(
            w.take(now.clone(), &h, Span::Check).is_empty(),
            "first reading back up"
        );
        let g = now[0].as_mut().unwrap();
        g.nvlinks[0].1.replay = more.replay.map(|r| r + 200);
        let f = w.take(now, &h, Span::Check);
        assert_eq!((f.len(), f[0].status), (1, Status::Fail), "{f:#?}");
        // A GPU whose NVLink counters were not available at the start: its links' errors are
        // never judged, and a link of it that goes down still fails.
        let mut inv: Inventory = crate::testutil::simulated("h100-sxm-8", &[]).node;
        inv.gpus.truncate(1);
        inv.gpus[0].unavailable.push(Reading::NvlinkErrors);
        let mut w = Watch::start(&inv);
        let mut now = vec![Some(ErrorCounts::of(&crate::inventory::Gpu {
            unavailable: vec![],
            ..inv.gpus[0].clone()
        }))];
        let g = now[0].as_mut().unwrap();
        g.nvlinks[1].1.replay = Some(5000);
        assert!(w.take(now.clone(), &h, Span::Check).is_empty());
        let g = now[0].as_mut().unwrap();
        let (link, _) = g.nvlinks.remove(0);
        g.links_down.push(link);
        let f = w.take(now, &h, Span::Check);
        assert_eq!(brief(&f).len(), 1, "{f:#?}");
        assert!(f[0].reason.contains("went down"), "{f:#?}");
    }

    /// A link that counted its data errors by CRC before and answers only its ECC count now has
    /// no data growth to tell (two counters are not one count), and the finding on what did
    /// grow names the counters now read; its total now counts the ECC count.
    #[test]
    fn data_errors_counted_by_another_counter_now_are_not_compared() {
        let mut b = clean();
        b.nvlinks[0].1.crc_data = Some(0);
        let mut n = clean();
        n.nvlinks[0].1.crc_data = None;
        n.nvlinks[0].1.ecc_data = Some(90);
        let f = counter_findings(&[Some(b.clone())], &[Some(n.clone())], &health());
        // Not growth: only the CRC count's loss is said (not available here).
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Skip, "{f:#?}");
        assert!(f[0].reason.contains("link 4's crc_data"), "{}", f[0].reason);
        n.nvlinks[0].1.replay = Some(20);
        let f = counter_findings(&[Some(b)], &[Some(n)], &health());
        let grew: Vec<&Finding> = f.iter().filter(|x| x.status != Status::Skip).collect();
        assert_eq!(grew.len(), 1, "{f:#?}");
        assert_eq!(
            grew[0].reason,
            "GPU 0 link 4: NVLink errors (replay, recovery, flit CRC, data ECC) rose by 20 while \
             this check ran, to 110, beyond the limit of 100"
        );
    }

    /// Each reading the inventory found not available stays unjudged, whatever later readings
    /// answer: the GPU's inventory still holds the counts it listed unavailable.
    #[test]
    fn readings_unavailable_at_the_start_are_never_judged() {
        let mut inv: Inventory = crate::testutil::simulated("h100-sxm-8", &[]).node;
        let readings = [
            Reading::EccErrors,
            Reading::RemappedRows,
            Reading::PcieReplays,
            Reading::NvlinkErrors,
        ];
        for (g, r) in readings.iter().enumerate() {
            inv.gpus[g].unavailable.push(*r);
        }
        let now: Vec<Option<ErrorCounts>> = inv
            .gpus
            .iter()
            .map(|g| {
                let mut c = ErrorCounts::of(&crate::inventory::Gpu {
                    unavailable: vec![],
                    ..g.clone()
                });
                c.ecc.volatile_uncorrected = Some(5);
                c.remapped_rows = Some(crate::inventory::RemappedRows {
                    failure: true,
                    ..Default::default()
                });
                c.pcie_replays = Some(500);
                c.nvlinks[0].1.replay = Some(500);
                Some(c)
            })
            .collect();
        let f = Watch::start(&inv).take(now, &health(), Span::Check);
        // GPUs 4 to 7 count all four; GPUs 0 to 3 three each, the one they hide left out.
        for (g, hidden) in readings.iter().enumerate() {
            let on: Vec<&str> = f
                .iter()
                .filter(|x| x.subject.gpu == Some(g))
                .map(|x| x.metric.as_deref().unwrap())
                .collect();
            assert_eq!(on.len(), 3, "GPU {g}: {on:?}");
            assert!(!on.contains(&hidden.key()), "GPU {g}: {on:?}");
            assert!(f.iter().all(|x| x.status != Status::Skip), "{f:#?}");
        }
        assert_eq!(f.iter().filter(|x| x.subject.gpu == Some(4)).count(), 4);
    }

    /// A failure on a counter stops re-measuring, as one on an XID does; a counter shown within
    /// its limit, or a warning, does not.
    #[test]
    fn a_failure_on_a_counter_is_never_re_measured() {
        let f = after(|c| c.pcie_replays = Some(81), |_| {});
        assert_eq!(
            failed_under_load(&f),
            Some("an error counted under load is never re-measured away")
        );
        let f = after(|c| c.remapped_rows.as_mut().unwrap().pending = true, |_| {});
        assert!(failed_under_load(&f).is_some());
        assert!(failed_under_load(&after(|c| c.pcie_replays = Some(2), |_| {})).is_none());
        let warn = after(|c| c.retired_pages.as_mut().unwrap().pending = true, |_| {});
        assert!(failed_under_load(&warn).is_none());
        // A failure of the check's own on another metric is measured again.
        let mut other = after(|c| c.pcie_replays = Some(81), |_| {});
        other[0].metric = Some("h2d".into());
        assert!(failed_under_load(&other).is_none());
    }
}
