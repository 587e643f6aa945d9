//! Environment variables that would change what nodecert's own CUDA work measures.
//!
//! A node's shell often carries settings made for training jobs: `CUDA_DEVICE_MAX_CONNECTIONS=1`
//! (Megatron), `CUBLAS_WORKSPACE_CONFIG=:4096:8` (PyTorch's deterministic mode),
//! `NVIDIA_TF32_OVERRIDE`, `CUDA_LAUNCH_BLOCKING` while debugging. Inherited by nodecert, each
//! would lower or change a figure (a TF32 GEMM run as fp32 reads as a GPU at a sixth of its
//! rate) and the certificate would blame the hardware. So, first thing in `main`, before any
//! thread and any CUDA, [`set_aside`] removes them from nodecert's own environment and records
//! what it removed: the evidence names them, and the console says so when a run starts.
//!
//! The record travels to the nodecerts nodecert starts (the re-exec for libraries, the child
//! that measures without NVLS, a Slurm job's ranks) in [`CARRIED_ENV`], so that the one that
//! writes the evidence names what its parent set aside.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// The variables set aside, and what each would do to the figures.
pub const SET_ASIDE: &[(&str, &str)] = &[
    (
        "NVIDIA_TF32_OVERRIDE",
        "forces TF32 on (1) or off (0) for every GEMM: the fp32 and TF32 figures would not be \
         what their names say",
    ),
    (
        "CUDA_LAUNCH_BLOCKING",
        "makes each kernel launch wait for the one before: short kernels and training steps \
         would run slower",
    ),
    (
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "limits the hardware queues work is fed through: copies both ways at once and compute \
         beside communication would be serialised",
    ),
    (
        "CUBLAS_WORKSPACE_CONFIG",
        "limits cuBLAS's workspace (deterministic mode): GEMMs could lose their fastest \
         algorithms",
    ),
];

/// Where a nodecert leaves what it set aside for the nodecerts it starts.
pub const CARRIED_ENV: &str = "NODECERT_CUDA_ENV_SET_ASIDE";

/// The longest value recorded (characters); the longest carried record (bytes).
const MAX_VALUE: usize = 256;
const MAX_CARRIED: usize = 16 * 1024;

/// A variable set aside, with its value as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAside {
    pub name: String,
    pub value: String,
}

impl SetAside {
    /// "NVIDIA_TF32_OVERRIDE=0: forces TF32 ...".
    pub fn describe(&self) -> String {
        let why = SET_ASIDE
            .iter()
            .find(|(n, _)| *n == self.name)
            .map_or("", |(_, w)| w);
        format!("{}={}: {why}", self.name, self.value)
    }
}

/// What is set aside, given the variables `var` reads (this process's environment, where a
/// parent's record is under [`CARRIED_ENV`]): the parent's first, then this process's own.
pub fn found(var: impl Fn(&str) -> Option<String>) -> Vec<SetAside> {
    let mut out: Vec<SetAside> = var(CARRIED_ENV)
        .filter(|t| t.len() <= MAX_CARRIED)
        .and_then(|t| serde_json::from_str::<Vec<SetAside>>(&t).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| SET_ASIDE.iter().any(|(n, _)| *n == s.name))
        .collect();
    for (name, _) in SET_ASIDE {
        if let Some(v) = var(name) {
            if !out.iter().any(|s| s.name == *name) {
                out.push(SetAside {
                    name: name.to_string(),
                    value: v.chars().take(MAX_VALUE).collect(),
                });
            }
        }
    }
    for s in &mut out {
        s.value = s.value.chars().take(MAX_VALUE).collect();
    }
    out
}

static FOUND: OnceLock<Vec<SetAside>> = OnceLock::new();

/// Remove the variables of [`SET_ASIDE`] from this process's environment and keep what was
/// there (also in [`CARRIED_ENV`], for the nodecerts this one starts). Call it before any
/// thread starts (it changes the environment) and before anything starts CUDA; later calls do
/// nothing.
pub fn set_aside() {
    FOUND.get_or_init(|| {
        let all = found(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()));
        for (name, _) in SET_ASIDE {
            std::env::remove_var(name);
        }
        match serde_json::to_string(&all) {
            Ok(t) if !all.is_empty() => std::env::set_var(CARRIED_ENV, t),
            _ => std::env::remove_var(CARRIED_ENV),
        }
        all
    });
}

/// What [`set_aside`] removed (nothing where it was not called).
pub fn set_aside_at_start() -> Vec<SetAside> {
    FOUND.get().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::env_of as env;

    /// Each listed variable is recorded with its value, in the list's order, and a parent's
    /// record comes first and wins; anything else, or a record that does not read, is not.
    #[test]
    fn the_variables_that_change_figures_are_found_and_a_parents_record_kept() {
        assert_eq!(found(env(&[("PATH", "/bin")])), vec![]);
        let f = found(env(&[
            ("CUDA_DEVICE_MAX_CONNECTIONS", "1"),
            ("NVIDIA_TF32_OVERRIDE", "0"),
        ]));
        assert_eq!(
            f.iter()
                .map(|s| (s.name.as_str(), s.value.as_str()))
                .collect::<Vec<_>>(),
            [
                ("NVIDIA_TF32_OVERRIDE", "0"),
                ("CUDA_DEVICE_MAX_CONNECTIONS", "1")
            ]
        );
        assert!(f[0]
            .describe()
            .starts_with("NVIDIA_TF32_OVERRIDE=0: forces TF32 on (1) or off (0)"));
        // A child: its own environment no longer has them; the parent's record names them.
        let carried = serde_json::to_string(&f).unwrap();
        assert_eq!(found(env(&[(CARRIED_ENV, &carried)])), f);
        let both = found(env(&[
            (CARRIED_ENV, &carried),
            ("NVIDIA_TF32_OVERRIDE", "1"),
            ("CUDA_LAUNCH_BLOCKING", "1"),
        ]));
        assert_eq!(both.len(), 3);
        assert_eq!(both[0].value, "0");
        assert_eq!(both[2].name, "CUDA_LAUNCH_BLOCKING");
        // Not a record, a name not in the list, or a long value: ignored, dropped, cut.
        assert_eq!(found(env(&[(CARRIED_ENV, "not json")])), vec![]);
        let odd = r#"[{"name":"LD_PRELOAD","value":"x"}]"#;
        assert_eq!(found(env(&[(CARRIED_ENV, odd)])), vec![]);
        let long = "x".repeat(10_000);
        let f = found(env(&[("CUBLAS_WORKSPACE_CONFIG", &long)]));
        assert_eq!(f[0].value.len(), MAX_VALUE);
    }
}
