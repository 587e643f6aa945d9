//! XIDs raised while the checks run.
//!
//! The health check judges the XIDs seen when the run starts (NVML's events and the kernel
//! log's look-back). A GPU that raises one under load (a double-bit ECC error during the GEMMs,
//! a page fault in a collective) may still finish what nodecert asked of it, and the figures of
//! that check would pass. So after each check that ran on the GPUs the runner reads the XIDs
//! raised since ([`crate::backend::Backend::xids_since`]) and files them under that check, as
//! the health check judges them: one in the suite's `fail_xids` fails, any other warns. Where the
//! suite has no health check, nothing is read. A backend that cannot read them, or a GPU no
//! source can see one on, adds nothing: the health check's reading of the start names that.

use super::judge::finding;
use super::Ctx;
use crate::backend::Backend;
use crate::evidence::{Finding, Status, Subject};
use crate::inventory::XidEvent;

/// The metric the findings are filed under (the health check's reading of the same).
const METRIC: &str = "xids";

/// The findings on `now`, the XIDs each GPU raised during the check (by GPU index), held to
/// `fail_xids`.
pub fn findings(now: &[Option<Vec<XidEvent>>], fail_xids: &[u32]) -> Vec<Finding> {
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
                        "GPU {gpu}: XID {} ({}) raised while this check ran{}",
                        x.code,
                        x.source,
                        if fatal { ", which fails a node" } else { "" }
                    ),
                )
                .on(METRIC),
            );
        }
    }
    out
}

/// Whether `findings` fail on an XID raised during the check: a fault of the GPU, which a
/// check measured again would not see again (each event is told once), so never re-measured.
pub fn failed_on_xid(findings: &[Finding]) -> bool {
    findings
        .iter()
        .any(|f| f.status == Status::Fail && f.metric.as_deref() == Some(METRIC))
}

/// The XIDs raised since the last reading, judged (nothing where the suite has no health
/// check, or where a call of the check's may be stuck in the driver).
pub fn after_check(ctx: &Ctx, backend: &mut dyn Backend) -> Vec<Finding> {
    if crate::backend::cuda::thread_abandoned() {
        return Vec::new();
    }
    let Some(h) = ctx.suite.checks.health.as_ref().filter(|h| h.enabled) else {
        return Vec::new();
    };
    match backend.xids_since() {
        Ok(now) => findings(&now, &h.fail_xids),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let f = findings(&now, &[48, 79]);
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
        assert!(findings(&now[..2], &[48]).is_empty());
        assert!(failed_on_xid(&f));
        assert!(!failed_on_xid(&f[1..]));
    }
}
