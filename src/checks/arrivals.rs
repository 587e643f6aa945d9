//! Processes that start on a GPU during the run.
//!
//! The health check judges the processes found when the run starts. A job that starts later
//! shares its GPU with every check after it, and what those checks measure there is a share of
//! the GPU: it would read as a slow GPU or a slow link. So after each check that ran on the GPUs
//! the runner reads each GPU's processes again ([`crate::backend::Backend::gpu_processes`]) and
//! holds them to those found at the start: a process that was not there is an error of that
//! check (untestable, exit 3), as another process at the start is an error of the health check.
//! With `checks.health.other_processes = "shown"` it is shown, not judged, as there.
//!
//! The lists are read between checks, not during them: a job that starts and ends within one
//! check is not seen, and so is one NVML cannot list (from another container, where nodecert
//! runs in one). NVML numbers processes as the host does: where nodecert runs in its own PID
//! namespace, one process it cannot find under that number may be nodecert itself, so a single
//! such process is shown and not judged (one more for each child of nodecert's that has not
//! been reaped); more than that cannot all be nodecert, and are an error. An MPS server that
//! starts is named as one: the MPS control daemon started it for another job (nodecert's own
//! CUDA goes around the daemon, `platform::mps`), and every job shares the GPU through it.

use super::Ctx;
use crate::backend::real::nvml::MAX_PROCESSES;
use crate::backend::Backend;
use crate::evidence::{Finding, Status, Subject};
use crate::inventory::{GpuProcess, Inventory};
use crate::suite::OtherProcesses;

/// The metric name the findings are filed under (the health check's reading of the same).
const METRIC: &str = "processes";

/// The findings on the processes running now (`now`, by GPU index) that were not running at
/// the start (`start`). `visible(pid)`: whether nodecert can find the process in its own PID
/// namespace. A GPU whose list was not read at the start, or is not read now, has nothing to
/// compare: the health check's reading of the start stands for it.
///
/// `own_hidden`: how many processes nodecert cannot see may be its own (itself, and its
/// children not reaped yet, as the host numbers them): more than that cannot all be nodecert.
pub fn findings(
    start: &Inventory,
    now: &[Option<Vec<GpuProcess>>],
    mode: OtherProcesses,
    visible: &dyn Fn(u32) -> bool,
    own_hidden: usize,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut unseen: Vec<(usize, &GpuProcess)> = Vec::new();
    for g in &start.gpus {
        let (Some(before), Some(Some(after))) = (&g.processes, now.get(g.index)) else {
            continue;
        };
        // A list cut at its most names other processes from one read to the next: nothing to
        // compare (the health check named those of the start).
        if before.len() >= MAX_PROCESSES || after.len() >= MAX_PROCESSES {
            continue;
        }
        let new: Vec<&GpuProcess> = after
            .iter()
            .filter(|p| !before.iter().any(|b| b.pid == p.pid))
            .collect();
        let (seen, hidden): (Vec<&GpuProcess>, Vec<&GpuProcess>) =
            new.into_iter().partition(|p| visible(p.pid));
        unseen.extend(hidden.into_iter().map(|p| (g.index, p)));
        if seen.is_empty() {
            continue;
        }
        let each: Vec<String> = seen.iter().map(|p| p.describe()).collect();
        let found = match seen.len() {
            1 => "1 process started".to_string(),
            n => format!("{n} processes started"),
        };
        let mps = seen.iter().any(|p| p.is_mps_server());
        let what = format!(
            "GPU {}: another process started on it during the run: {}",
            g.index,
            each.join(", ")
        );
        let then = if mps {
            "an MPS server, which the MPS control daemon starts for a CUDA job that connects to \
             it (nodecert's own work does not: it goes around the daemon, `platform::mps`): every \
             job then shares the GPU through it; stop MPS (`echo quit | \
             nvidia-cuda-mps-control`) and run again"
        } else {
            "stop it and run again"
        };
        let sub = Subject::gpu(g.index);
        out.push(match mode {
            OtherProcesses::Error => super::judge::finding(
                Status::Error,
                sub,
                found,
                "no process started during the run",
                format!(
                    "{what}; what this check measured there is a share of the GPU, not the GPU: \
                     {then}"
                ),
            )
            .on(METRIC),
            OtherProcesses::Shown => super::judge::finding(
                Status::Pass,
                sub,
                found,
                "shown, not judged",
                format!("{what} (checks.health.other_processes = \"shown\")"),
            )
            .on(METRIC)
            .informational(),
        });
    }
    if !unseen.is_empty() {
        let mut gpus: Vec<usize> = unseen.iter().map(|(g, _)| *g).collect();
        gpus.dedup();
        let mut pids: Vec<u32> = unseen.iter().map(|(_, p)| p.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let many = pids.len() > own_hidden;
        let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
        let list = format!(
            "{} now also list{} pid {}, which nodecert cannot find in its own PID namespace",
            super::judge::gpu_list(&gpus),
            if gpus.len() == 1 { "s" } else { "" },
            pids.join(", ")
        );
        let found = format!("pid {} outside nodecert's view", pids.join(", "));
        out.push(if many && mode == OtherProcesses::Error {
            super::judge::finding(
                Status::Error,
                Subject::node(),
                found,
                "no process started during the run",
                format!(
                    "{list}: at most one of them is nodecert itself as the host numbers it, so \
                     another job started during the run; what this check measured is a share \
                     of the GPUs, not the GPUs: stop it and run again"
                ),
            )
            .on(METRIC)
        } else {
            super::judge::finding(
                Status::Pass,
                Subject::node(),
                found,
                "shown, not judged",
                format!(
                    "{list}: nodecert itself as the host numbers it, or another container's \
                     process; it cannot tell which, so this is not judged"
                ),
            )
            .on(METRIC)
            .informational()
        });
    }
    out
}

/// [`findings`] after a check that ran on the GPUs, with the lists read now. A backend that
/// cannot read them again adds nothing: the health check's reading of the start stands. Nor
/// is anything read once a measurement thread was left stuck in the driver: NVML may block
/// behind it.
pub fn after_check(ctx: &Ctx, backend: &mut dyn Backend) -> Vec<Finding> {
    if crate::backend::cuda::thread_abandoned() {
        return Vec::new();
    }
    read_again(ctx, backend)
}

/// [`after_check`] past its guard: the lists read now, held to the start's.
fn read_again(ctx: &Ctx, backend: &mut dyn Backend) -> Vec<Finding> {
    let Ok(now) = backend.gpu_processes() else {
        return Vec::new();
    };
    let mode = ctx
        .suite
        .checks
        .health
        .as_ref()
        .and_then(|h| h.other_processes)
        .unwrap_or_default();
    // A simulated node's processes are its own numbers, in no namespace.
    let simulated = ctx.simulated;
    let visible = |pid: u32| simulated || std::path::Path::new(&format!("/proc/{pid}")).exists();
    let own = 1 + crate::backend::no_nvls::live_children().len();
    findings(ctx.inventory, &now, mode, &visible, own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Gpu;

    fn job(pid: u32) -> GpuProcess {
        GpuProcess {
            pid,
            name: Some("python3".into()),
            memory_bytes: Some(1 << 30),
        }
    }

    /// Four GPUs: none busy at the start but GPU 2 (pid 7), and GPU 3 unread then.
    fn start() -> Inventory {
        let gpu = |index, processes| Gpu {
            index,
            processes,
            ..Default::default()
        };
        Inventory {
            gpus: vec![
                gpu(0, Some(vec![])),
                gpu(1, Some(vec![])),
                gpu(2, Some(vec![job(7)])),
                gpu(3, None),
            ],
            ..Default::default()
        }
    }

    fn all(_: u32) -> bool {
        true
    }

    /// What ran at the start, a GPU unread at the start or now, and an empty list say nothing.
    #[test]
    fn nothing_new_is_nothing_said() {
        let now = vec![Some(vec![]), None, Some(vec![job(7)]), Some(vec![job(9)])];
        assert_eq!(findings(&start(), &now, OtherProcesses::Error, &all, 1), []);
        assert_eq!(findings(&start(), &[], OtherProcesses::Error, &all, 1), []);
    }

    /// A process that started is an error of the check on the GPU it holds, naming it; beside
    /// the one that ran at the start, only the new one is named.
    #[test]
    fn a_process_that_started_is_an_error_naming_it() {
        let now = vec![
            Some(vec![]),
            Some(vec![job(11), job(12)]),
            Some(vec![job(7), job(13)]),
            None,
        ];
        let f = findings(&start(), &now, OtherProcesses::Error, &all, 1);
        assert_eq!(f.len(), 2, "{f:#?}");
        assert_eq!(f[0].status, Status::Error);
        assert!(!f[0].info);
        assert_eq!(f[0].subject, Subject::gpu(1));
        assert_eq!(f[0].metric.as_deref(), Some("processes"));
        assert_eq!(f[0].found, "2 processes started");
        assert_eq!(
            f[0].reason,
            "GPU 1: another process started on it during the run: pid 11 (python3, 1 GiB), \
             pid 12 (python3, 1 GiB); what this check measured there is a share of the GPU, \
             not the GPU: stop it and run again"
        );
        assert_eq!(f[1].subject, Subject::gpu(2));
        assert_eq!(f[1].found, "1 process started");
        assert!(f[1].reason.contains("pid 13") && !f[1].reason.contains("pid 7 "));
        // Shown, not judged, where the suite shows other processes.
        let f = findings(&start(), &now, OtherProcesses::Shown, &all, 1);
        assert!(
            f.iter().all(|x| x.info && x.status == Status::Pass),
            "{f:#?}"
        );
        assert!(f[0]
            .reason
            .ends_with("(checks.health.other_processes = \"shown\")"));
    }

    /// A process nodecert cannot find in its PID namespace may be nodecert itself: shown once
    /// for the node, not judged; one it can find beside it is still an error.
    #[test]
    fn a_process_outside_the_namespace_is_shown_not_judged() {
        let now = vec![
            Some(vec![job(90_001)]),
            Some(vec![job(90_001), job(15)]),
            Some(vec![job(7)]),
            None,
        ];
        let f = findings(
            &start(),
            &now,
            OtherProcesses::Error,
            &|pid| pid < 90_000,
            1,
        );
        assert_eq!(f.len(), 2, "{f:#?}");
        assert_eq!(
            (f[0].subject.clone(), f[0].status),
            (Subject::gpu(1), Status::Error)
        );
        assert!(f[0].reason.contains("pid 15") && !f[0].reason.contains("90001"));
        assert!(f[1].info);
        assert_eq!(f[1].subject, Subject::node());
        assert_eq!(f[1].found, "pid 90001 outside nodecert's view");
        assert!(
            f[1].reason
                .starts_with("GPUs 0, 1 now also list pid 90001, which nodecert cannot"),
            "{}",
            f[1].reason
        );
        let one = findings(&start(), &now[..1], OtherProcesses::Error, &|_| false, 1);
        assert!(one[0].reason.starts_with("GPU 0 now also lists pid 90001"));
        // Two such processes cannot both be nodecert: an error, unless shown.
        let two = vec![Some(vec![job(90_001)]), Some(vec![job(90_002)])];
        let f = findings(&start(), &two, OtherProcesses::Error, &|_| false, 1);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].status, f[0].info), (Status::Error, false));
        assert_eq!(f[0].found, "pid 90001, 90002 outside nodecert's view");
        assert!(f[0]
            .reason
            .contains("at most one of them is nodecert itself"));
        let f = findings(&start(), &two, OtherProcesses::Shown, &|_| false, 1);
        assert!(f[0].info && f[0].status == Status::Pass);
        // While a child of nodecert's own may still hold a GPU, two may be nodecert's.
        let f = findings(&start(), &two, OtherProcesses::Error, &|_| false, 2);
        assert!(f[0].info && f[0].status == Status::Pass, "{f:#?}");
    }

    /// An MPS server that starts is named as one, with how to stop MPS.
    #[test]
    fn an_mps_server_that_starts_is_named() {
        let mut mps = job(31);
        mps.name = Some("nvidia-cuda-mps-server".into());
        let now = vec![Some(vec![mps]), Some(vec![job(32)])];
        let f = findings(&start(), &now, OtherProcesses::Error, &all, 1);
        assert!(f[0]
            .reason
            .ends_with("stop MPS (`echo quit | nvidia-cuda-mps-control`) and run again"));
        assert!(f[1].reason.ends_with("not the GPU: stop it and run again"));
    }

    /// After a check: the lists the backend reads now, held to the inventory's. A simulated
    /// node's numbers are in no namespace; on a real one a number nodecert cannot find may be
    /// itself (one is allowed). A backend that cannot read them again adds nothing.
    #[test]
    fn after_a_check_the_backend_is_asked_again() {
        let suite = crate::suite::load::load("h200-vm-1").unwrap().suite;
        let inv = start();
        // A pid no system has (above pid_max).
        let nowhere = job(u32::MAX);
        let mut b = crate::testutil::Scripted {
            processes: Some(vec![Some(vec![nowhere])]),
            ..Default::default()
        };
        // (read_again: after_check adds nothing in a test process where another test left a
        // worker thread behind on purpose.)
        let mut ctx = crate::testutil::ctx(&suite, &inv);
        let f = read_again(&ctx, &mut b);
        assert_eq!((f.len(), f[0].status), (1, Status::Error), "{f:#?}");
        ctx.simulated = false;
        let f = read_again(&ctx, &mut b);
        assert_eq!(
            (f.len(), f[0].status, f[0].info),
            (1, Status::Pass, true),
            "{f:#?}"
        );
        b.processes = None;
        assert_eq!(read_again(&ctx, &mut b), []);
    }

    /// A list cut at its most may name other processes from one read to the next: not
    /// compared.
    #[test]
    fn a_list_at_its_most_is_not_compared() {
        let full: Vec<GpuProcess> = (0..MAX_PROCESSES as u32).map(|p| job(1000 + p)).collect();
        let mut inv = start();
        inv.gpus[0].processes = Some(full.clone());
        let mut other = full[..MAX_PROCESSES - 1].to_vec();
        other[0] = job(5);
        assert_eq!(
            findings(&inv, &[Some(other)], OtherProcesses::Error, &all, 1),
            []
        );
        // Nor one that reaches its most now, from fewer at the start.
        let mut inv_less = start();
        inv_less.gpus[0].processes = Some(full[..MAX_PROCESSES - 1].to_vec());
        assert_eq!(
            findings(
                &inv_less,
                &[Some(full.clone())],
                OtherProcesses::Error,
                &all,
                1
            ),
            []
        );
        let mut less = full;
        less.pop();
        inv.gpus[0].processes = Some(less.clone());
        less[0] = job(5);
        assert_eq!(
            findings(&inv, &[Some(less)], OtherProcesses::Error, &all, 1).len(),
            1
        );
    }
}
