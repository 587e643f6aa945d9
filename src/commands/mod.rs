//! What each command does, one module per command; `cli` only parses and dispatches. Helpers
//! that several commands share live here and in [`output`].

pub mod check;
pub mod diff;
pub mod fleet;
pub mod health_check;
pub mod inventory;
pub mod keygen;
pub mod list;
pub mod output;
pub mod render;
pub mod run;
pub mod sign;
pub mod signer;
pub mod verify;

use crate::backend::sim::{self, Fault, SimBackend};
use crate::backend::Backend;
use crate::error::{Error, InputError, Result};
use crate::evidence::{Environment, Evidence, SimulationRecord};
use crate::suite::load;
use std::path::{Path, PathBuf};

/// The backend: simulated when asked, else the real node.
pub(crate) fn backend(
    simulate: Option<&str>,
    inject: &[String],
    seed: u64,
    node_name: Option<&str>,
) -> Result<(Box<dyn Backend>, Option<SimulationRecord>)> {
    match simulate {
        Some(spec) => {
            note_if_shadowed("simulated node", spec, is_embedded_node(spec));
            let node = sim::load_node(spec)?;
            let faults: Vec<Fault> = inject
                .iter()
                .map(|s| {
                    Fault::parse(s)
                        .map_err(|e| Error::Input(InputError::Other(format!("--inject {e}"))))
                })
                .collect::<Result<_>>()?;
            let mut b = SimBackend::new(node, faults, seed)?;
            if let Some(name) = node_name {
                check_node_name(name)?;
                b = b.named(name);
            }
            let rec = b.record();
            Ok((Box::new(b), Some(rec)))
        }
        None => {
            // cudarc loads libraries by names that pip wheels and runtime packages may lack:
            // re-execute once with links to the versioned files found (see backend::cuda::libs).
            crate::backend::cuda::libs::reexec_if_needed();
            Ok((crate::backend::real::open()?, None))
        }
    }
}

pub fn environment(args: &[String]) -> Environment {
    use crate::platform::hypervisor::system_text;
    use std::path::Path;
    let os = system_text(Path::new("/etc/os-release"))
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    let kernel = crate::platform::hypervisor::read_trimmed(Path::new("/proc/sys/kernel/osrelease"));
    let cpu_model = system_text(Path::new("/proc/cpuinfo")).and_then(|t| {
        t.lines().find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
    });
    Environment {
        os,
        kernel,
        cpu_model,
        command_line: args.to_vec(),
        job: job_from(|k| std::env::var(k).ok()),
        cuda_env_set_aside: crate::platform::cuda_env::set_aside_at_start(),
    }
}

/// A name for a node of a simulated fleet: a host name (letters, digits, '.', '-', '_'; at most
/// 64), since it names the node's folder and its evidence.
pub fn check_node_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(InputError::Other(format!(
            "node name {:?}: use 1 to 64 letters, digits, '.', '-' or '_', not starting with '.' or '-'",
            crate::console::visible(name)
        ))
        .into())
    }
}

/// The scheduler job this process is a task of, from the variables the scheduler sets: Slurm's
/// `SLURM_JOB_ID`, `SLURM_PROCID`, `SLURM_NTASKS` and `SLURMD_NODENAME`, or on Kubernetes the
/// Indexed Job's `JOB_COMPLETION_INDEX` with the variables `nodecert fleet k8s` sets from the
/// downward API (`NODECERT_JOB`, `NODECERT_JOB_COMPLETIONS`, `NODE_NAME`). A value longer than
/// 256 bytes is not a job's: ignored.
pub fn job_from(var: impl Fn(&str) -> Option<String>) -> Option<crate::evidence::JobRecord> {
    let get = |k: &str| var(k).filter(|v| !v.is_empty() && v.len() <= 256);
    let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
    if let Some(id) = get("SLURM_JOB_ID") {
        return Some(crate::evidence::JobRecord {
            scheduler: "slurm".into(),
            id,
            rank: num("SLURM_PROCID"),
            tasks: num("SLURM_NTASKS"),
            node: get("SLURMD_NODENAME"),
        });
    }
    let rank = num("JOB_COMPLETION_INDEX")?;
    Some(crate::evidence::JobRecord {
        scheduler: "kubernetes".into(),
        id: get("NODECERT_JOB").unwrap_or_default(),
        rank: Some(rank),
        tasks: num("NODECERT_JOB_COMPLETIONS"),
        node: get("NODE_NAME"),
    })
}

/// The exit code of the run's verdict: 3 when a measurement failed (the node could not be
/// tested), else 1 on any failure, else 5 when the run did not finish, 6 when nothing was
/// judged, 0 on a pass.
pub fn exit_for(ev: &Evidence) -> u8 {
    ev.assess().exit_code()
}

/// Read evidence given as a file or as a report folder holding evidence.json.
pub(crate) fn read_evidence(p: &Path) -> Result<(PathBuf, Evidence)> {
    let path = Evidence::path_in(p);
    let ev = Evidence::read(&path).map_err(|e| Error::Input(InputError::Other(e)))?;
    Ok((path, ev))
}

/// A tiny evidence used to try user templates before a run.
pub(crate) fn sample_evidence_for_templates() -> Evidence {
    let loaded = load::load("h200-vm-1").expect("embedded suite loads");
    let mut b = SimBackend::new(
        sim::load_node("h200-vm-1").expect("embedded node loads"),
        vec![],
        1,
    )
    .expect("valid");
    let inv = b.inventory().expect("simulated inventory");
    // Recorded like any simulated run: an embedded template the user's folder does not override
    // reads `ev.simulation` whenever the evidence is simulated.
    let rec = b.record();
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent)
        .expect("no io without a path")
}

/// A bare name that names both an embedded suite (or simulated node) and a file or folder here
/// takes the embedded one; say so, and how to name the file instead.
pub(crate) fn note_if_shadowed(what: &str, spec: &str, embedded: bool) {
    if embedded && Path::new(spec).symlink_metadata().is_ok() {
        let spec = crate::console::visible(spec);
        crate::errln!(
            "note: {spec} is the embedded {what} of that name; for the file or folder {spec} \
             here, write ./{spec}"
        );
    }
}

/// Whether `spec` is the name of an embedded simulated node.
pub(crate) fn is_embedded_node(spec: &str) -> bool {
    sim::EMBEDDED.iter().any(|(n, _)| *n == spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job(vars: &[(&str, &str)]) -> Option<crate::evidence::JobRecord> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        job_from(|k| m.get(k).cloned())
    }

    #[test]
    fn the_job_and_rank_come_from_the_scheduler_that_started_the_task() {
        let s = job(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "64"),
            ("SLURMD_NODENAME", "gpu017"),
            ("JOB_COMPLETION_INDEX", "9"),
        ])
        .unwrap();
        assert_eq!(
            (
                s.scheduler.as_str(),
                s.id.as_str(),
                s.rank,
                s.tasks,
                s.node.as_deref()
            ),
            ("slurm", "4242", Some(3), Some(64), Some("gpu017"))
        );
        let k = job(&[
            ("JOB_COMPLETION_INDEX", "9"),
            ("NODECERT_JOB", "nodecert"),
            ("NODECERT_JOB_COMPLETIONS", "16"),
            ("NODE_NAME", "node-9"),
        ])
        .unwrap();
        assert_eq!(
            (
                k.scheduler.as_str(),
                k.id.as_str(),
                k.rank,
                k.tasks,
                k.node.as_deref()
            ),
            ("kubernetes", "nodecert", Some(9), Some(16), Some("node-9"))
        );
        assert_eq!(job(&[]), None);
        assert_eq!(job(&[("JOB_COMPLETION_INDEX", "x")]), None);
        // A rank that is not a number is left out; a value too long to be a job's is ignored.
        let odd = job(&[("SLURM_JOB_ID", "1"), ("SLURM_PROCID", "-1")]).unwrap();
        assert_eq!(odd.rank, None);
        let long = "x".repeat(300);
        assert_eq!(job(&[("SLURM_JOB_ID", &long)]), None);
    }

    #[test]
    fn a_node_name_is_a_host_name() {
        for ok in ["n1", "gpu-017", "rack1.node_2"] {
            assert!(check_node_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-n", ".n", "a b", "n/1", "n\u{1b}", &"n".repeat(65)] {
            assert!(check_node_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_node_name(&"n".repeat(64)).is_ok());
    }
}
