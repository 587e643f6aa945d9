//! Loading suites: embedded ones by name, files by path, `extends` chains, strict validation.

use super::{Baseline, Suite, FORMAT_VERSION};
use crate::config::{self, Source};
use crate::error::InputError;
use crate::evidence::{Evidence, RunState};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Suites shipped inside the binary: (name, TOML text).
pub const EMBEDDED: &[(&str, &str)] = &[
    ("base", include_str!("../../suites/base.toml")),
    ("h100-sxm-8", include_str!("../../suites/h100-sxm-8.toml")),
    ("h200-sxm-8", include_str!("../../suites/h200-sxm-8.toml")),
    (
        "a100-sxm-80gb-8",
        include_str!("../../suites/a100-sxm-80gb-8.toml"),
    ),
    ("l40s-pcie-4", include_str!("../../suites/l40s-pcie-4.toml")),
    ("h200-vm-1", include_str!("../../suites/h200-vm-1.toml")),
    ("h100-vm-1", include_str!("../../suites/h100-vm-1.toml")),
];

/// The most files an `extends` chain may hold, the given one included (README, "Limits").
pub const MAX_EXTENDS_DEPTH: usize = 16;

/// A suite with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedSuite {
    pub suite: Suite,
    /// The file given (or "embedded:NAME").
    pub origin: String,
    /// SHA-256 of the file given, hex.
    pub sha256: String,
    /// The chain of files, the given one first.
    pub chain: Vec<Source>,
    /// The earlier run named by `[baseline]`, read while loading.
    pub baseline: Option<LoadedBaseline>,
    /// What the suite states that judges nothing ([`Suite::cautions`]), each located
    /// ("FILE:LINE:COL: checks.x.fail_below: ...").
    pub cautions: Vec<String>,
}

/// The evidence a suite's `[baseline]` names, read at load time so that a missing or unreadable
/// file is invalid input before anything runs.
#[derive(Debug, Clone)]
pub struct LoadedBaseline {
    /// The evidence file, resolved against the folder of the suite file that names it.
    pub path: PathBuf,
    pub evidence: Evidence,
}

pub fn embedded(name: &str) -> Option<&'static str> {
    EMBEDDED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Load a suite given as a path or as the name of an embedded suite.
///
/// The name of an embedded suite is that suite, even when a file or folder of the same name is
/// here (`run h200-vm-1 --out h200-vm-1` must not change what `run h200-vm-1` means): such a file
/// is `./NAME`. Anything else is a path.
pub fn load(spec: &str) -> Result<LoadedSuite, InputError> {
    let src = if let Some(text) = embedded(spec) {
        Source {
            name: format!("embedded:{spec}"),
            text: text.to_string(),
        }
    } else if Path::new(spec).exists() || spec.ends_with(".toml") || spec.contains('/') {
        read_source(Path::new(spec))?
    } else {
        let names: Vec<&str> = EMBEDDED.iter().map(|(n, _)| *n).collect();
        return Err(InputError::Other(format!(
            "no suite file or embedded suite named '{spec}' (embedded: {})",
            names.join(", ")
        )));
    };
    load_source(src)
}

fn read_source(path: &Path) -> Result<Source, InputError> {
    let text =
        crate::fsio::read::read_to_string(path, crate::fsio::read::Kind::Suite).map_err(|e| {
            InputError::Read {
                path: path.to_path_buf(),
                source: e,
            }
        })?;
    Ok(Source {
        name: path.display().to_string(),
        text,
    })
}

/// Load from an already-read source (used for files and embedded suites alike).
pub fn load_source(src: Source) -> Result<LoadedSuite, InputError> {
    let sha256 = hex::encode(Sha256::digest(src.text.as_bytes()));
    let origin = src.name.clone();
    let mut chain = Vec::new();
    let table = resolve(src, &mut chain, &mut Vec::new())?;
    let suite: Suite = config::deserialize(&chain, table)?;
    if let Some((path, msg, other)) = suite.validate().into_iter().next() {
        let at = match other {
            Some(other) => config::most_derived(&chain, [path, other]),
            None => path,
        };
        return Err(config::error_at(&chain, &at, msg));
    }
    let baseline = match &suite.baseline {
        Some(b) => Some(load_baseline(&chain, b)?),
        None => None,
    };
    let cautions = suite
        .cautions()
        .into_iter()
        .map(|(path, msg, _)| config::error_at(&chain, &path, msg).to_string())
        .collect();
    Ok(LoadedSuite {
        suite,
        origin,
        sha256,
        chain,
        baseline,
        cautions,
    })
}

/// Read the baseline evidence, relative to the file of the chain that sets `baseline.evidence`.
fn load_baseline(chain: &[Source], b: &Baseline) -> Result<LoadedBaseline, InputError> {
    let at = config::key_path("baseline.evidence");
    let file = config::locate(chain, &at).file;
    let path = Evidence::path_in(&dir_of(&file).join(&b.evidence));
    let evidence = Evidence::read(&path).map_err(|e| config::error_at(chain, &at, e))?;
    if evidence.state != RunState::Complete {
        return Err(config::error_at(
            chain,
            &at,
            format!(
                "{} is from a run that did not finish; use a complete run as the baseline",
                path.display()
            ),
        ));
    }
    if evidence.checks.iter().all(|c| c.metrics.is_empty()) {
        // Nothing to compare with: the regression judgement the suite promises could not be
        // made, whatever this run measures.
        return Err(config::error_at(
            chain,
            &at,
            format!(
                "{} holds no metrics; use a run that measured the figures to compare",
                path.display()
            ),
        ));
    }
    Ok(LoadedBaseline { path, evidence })
}

/// What makes two sources the same file: the canonical path of a file (so `./a.toml` and
/// `sub/../a.toml` are one), the name of an embedded suite.
fn identity(src: &Source) -> String {
    if src.name.starts_with("embedded:") {
        return src.name.clone();
    }
    std::fs::canonicalize(&src.name)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| src.name.clone())
}

/// Parse `src`, follow its `extends`, and return the merged table; `chain` collects the files,
/// `seen` their identities.
fn resolve(
    src: Source,
    chain: &mut Vec<Source>,
    seen: &mut Vec<String>,
) -> Result<toml::Table, InputError> {
    let id = identity(&src);
    if seen.contains(&id) {
        let names: Vec<String> = chain.iter().map(|s| s.name.clone()).collect();
        let message = format!(
            "`extends` forms a cycle: {} -> {} (the same file as {})",
            names.join(" -> "),
            src.name,
            id
        );
        // Located at the `extends` that closes the cycle (README: "a located exit 2").
        return Err(match chain.last() {
            Some(from) => config::error_at(
                std::slice::from_ref(from),
                &config::key_path("extends"),
                message,
            ),
            None => InputError::File {
                file: src.name.clone(),
                message,
            },
        });
    }
    seen.push(id);
    let mut table = config::parse_table(&src)?;
    config::check_format_version(&src, &table, FORMAT_VERSION)?;
    let parent = match table.remove("extends") {
        None => None,
        Some(toml::Value::String(p)) => Some(p),
        Some(_) => {
            return Err(config::error_at(
                std::slice::from_ref(&src),
                &config::key_path("extends"),
                "extends must be a string: an embedded suite's name or a path",
            ))
        }
    };
    let here = src.clone();
    chain.push(src);
    let Some(parent) = parent else {
        return Ok(table);
    };
    if chain.len() >= MAX_EXTENDS_DEPTH {
        return Err(config::error_at(
            std::slice::from_ref(&here),
            &config::key_path("extends"),
            format!("`extends` chains at most {MAX_EXTENDS_DEPTH} files; this one goes deeper"),
        ));
    }
    let parent_src = if let Some(text) = embedded(&parent) {
        Source {
            name: format!("embedded:{parent}"),
            text: text.to_string(),
        }
    } else {
        let p = dir_of(&here.name).join(&parent);
        if !p.exists() {
            return Err(config::error_at(
                std::slice::from_ref(&here),
                &config::key_path("extends"),
                format!(
                    "extends = \"{parent}\": no embedded suite of that name and no file {}",
                    p.display()
                ),
            ));
        }
        read_source(&p).map_err(|e| {
            config::error_at(
                std::slice::from_ref(&here),
                &config::key_path("extends"),
                format!("extends = \"{parent}\": {e}"),
            )
        })?
    };
    let mut merged = resolve(parent_src, chain, seen)?;
    // The parent's own name and description do not carry over to the child.
    config::merge(&mut merged, table);
    Ok(merged)
}

/// The folder paths in a suite file are relative to: the file's own, or the current folder for
/// an embedded suite.
fn dir_of(source_name: &str) -> PathBuf {
    if source_name.starts_with("embedded:") {
        PathBuf::from(".")
    } else {
        Path::new(source_name)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }
}

/// The GPUs each embedded suite is picked for when no suite is named, by the exact name NVML
/// gives them: a suite's `gpu_model` ("H100") is a part of a name, and would also take an H100
/// PCIe, an H100 NVL or a GH200 ("H200"), boards of other floors.
const PICKED_FOR: &[(&str, &[&str])] = &[
    ("h100-sxm-8", &["NVIDIA H100 80GB HBM3"]),
    ("h100-vm-1", &["NVIDIA H100 80GB HBM3"]),
    ("h200-sxm-8", &["NVIDIA H200"]),
    ("h200-vm-1", &["NVIDIA H200"]),
    ("a100-sxm-80gb-8", &["NVIDIA A100-SXM4-80GB"]),
    ("l40s-pcie-4", &["NVIDIA L40S"]),
];

/// The embedded suite that fits a node of `count` GPUs named `gpu_name` (those listed), and
/// `lost` more that the driver counts but could not hand out (not among those listed), if any.
/// The GPU name must be one the suite is for ([`PICKED_FOR`]) and the virtualization what it
/// expects. The GPU count is the suite's counting the lost GPUs; where every GPU is visible
/// (`all_visible`: no `CUDA_VISIBLE_DEVICES` choosing some), a node of 3, 5, 6 or 7 GPUs (no
/// board is built so) is held to the suite of the next size up, whose topology check then
/// fails it for the GPUs it lacks, rather than being turned away unjudged.
pub fn matching_embedded(
    gpu_name: &str,
    count: usize,
    lost: usize,
    virtualized: bool,
    all_visible: bool,
) -> Option<&'static str> {
    let name = gpu_name.trim();
    let seen = count + lost;
    let fits = |suite: &str| -> Option<usize> {
        let (_, names) = PICKED_FOR.iter().find(|(n, _)| *n == suite)?;
        if !names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return None;
        }
        let l = load(suite).ok()?;
        let n = &l.suite.node;
        let virt_fit = match n.virtualization {
            Some(super::VirtExpect::BareMetal) => !virtualized,
            Some(
                super::VirtExpect::Passthrough | super::VirtExpect::Vgpu | super::VirtExpect::Vm,
            ) => virtualized,
            _ => true,
        };
        virt_fit.then_some(n.gpu_count?)
    };
    let candidates: Vec<(&'static str, usize)> = EMBEDDED
        .iter()
        .filter_map(|(suite, _)| fits(suite).map(|c| (*suite, c)))
        .collect();
    if let Some((suite, _)) = candidates.iter().find(|(_, c)| *c == seen) {
        return Some(suite);
    }
    if !all_visible || seen == 0 || seen.is_power_of_two() {
        return None;
    }
    candidates
        .into_iter()
        .filter(|(_, c)| *c > seen)
        .min_by_key(|(_, c)| *c)
        .map(|(suite, _)| suite)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A suite is picked for the GPUs it was written for, by exact name and virtualization; a
    /// node that lost GPUs is held to the suite of the GPUs it had.
    #[test]
    fn a_suite_is_picked_by_exact_name_virtualization_and_the_gpus_the_node_had() {
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(
            matching_embedded(h100, 8, 0, false, true),
            Some("h100-sxm-8")
        );
        assert_eq!(
            matching_embedded(h100, 8, 0, true, true),
            Some("h100-sxm-8")
        );
        assert_eq!(matching_embedded(h100, 1, 0, true, true), Some("h100-vm-1"));
        assert_eq!(
            matching_embedded(" nvidia h200 ", 1, 0, true, true),
            Some("h200-vm-1")
        );
        // The VM suites expect passthrough: a bare-metal GPU is held to none of them.
        assert_eq!(matching_embedded(h100, 1, 0, false, true), None);
        // Boards of other floors whose names hold a suite's model.
        assert_eq!(
            matching_embedded("NVIDIA H100 PCIe", 1, 0, true, true),
            None
        );
        assert_eq!(
            matching_embedded("NVIDIA H100 NVL", 8, 0, false, true),
            None
        );
        assert_eq!(
            matching_embedded("NVIDIA GH200 480GB", 1, 0, true, true),
            None
        );
        // Lost GPUs count: 7 answering and 1 lost is the 8-GPU board.
        assert_eq!(
            matching_embedded(h100, 7, 1, false, true),
            Some("h100-sxm-8")
        );
        assert_eq!(matching_embedded(h100, 0, 1, true, true), Some("h100-vm-1"));
        // No board has 7 or 3 GPUs: the next suite up; 4 and 2 are boards of their own.
        assert_eq!(
            matching_embedded(h100, 7, 0, false, true),
            Some("h100-sxm-8")
        );
        assert_eq!(
            matching_embedded("NVIDIA L40S", 3, 0, false, true),
            Some("l40s-pcie-4")
        );
        assert_eq!(matching_embedded(h100, 4, 0, false, true), None);
        assert_eq!(matching_embedded("NVIDIA L40S", 2, 0, false, true), None);
        assert_eq!(matching_embedded("NVIDIA L40S", 5, 0, false, true), None);
        assert_eq!(matching_embedded(h100, 0, 0, false, true), None);
        // GPUs chosen by CUDA_VISIBLE_DEVICES (a Slurm step of 7 of 8): not rounded up.
        assert_eq!(matching_embedded(h100, 7, 0, false, false), None);
        assert_eq!(
            matching_embedded(h100, 8, 0, false, false),
            Some("h100-sxm-8")
        );
        assert_eq!(
            matching_embedded(h100, 7, 1, false, false),
            Some("h100-sxm-8")
        );
        // Every embedded suite with a GPU model is picked for some GPU.
        for (name, _) in EMBEDDED {
            let l = load(name).unwrap();
            if l.suite.node.gpu_model.is_some() {
                assert!(PICKED_FOR.iter().any(|(n, _)| n == name), "{name}");
            }
        }
    }

    #[test]
    fn every_embedded_suite_loads() {
        for (name, _) in EMBEDDED {
            let l = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&l.suite.name, name);
            // What ships judges what it states: no floor of 0 anywhere.
            assert_eq!(l.cautions, Vec::<String>::new(), "{name}");
        }
    }

    /// A floor of 0 loads (suites users wrote keep loading) but is named, at its line, as a
    /// bound that judges nothing; a floor above 0 is not.
    #[test]
    fn a_floor_of_zero_loads_with_a_caution_at_its_line() {
        let text = "format_version = 1\nname = \"z\"\n\
                    [checks.host_bandwidth.h2d]\nfail_below = 0\nwarn_below = 3\n\
                    [checks.p2p_latency.latency_us]\nwarn_below = 0.0\n\
                    [checks.collective.all_reduce]\n\
                    min_busbw_gbps = { \"1MiB\" = 0, \"1GiB\" = 400 }\n";
        let l = load_source(Source {
            name: "z.toml".into(),
            text: text.into(),
        })
        .unwrap();
        assert_eq!(
            l.cautions,
            [
                "z.toml:4:1: checks.host_bandwidth.h2d.fail_below",
                "z.toml:7:1: checks.p2p_latency.latency_us.warn_below",
                "z.toml:9:20: checks.collective.all_reduce.min_busbw_gbps.1MiB",
            ]
            .map(|at| format!(
                "{at}: a floor of 0 cannot fail (no figure is below 0), so it judges nothing: \
                 set one above 0 or drop it"
            ))
        );
    }
}
