//! `nodecert check`: validate a suite and print the plan it expands to.

use crate::backend::sim::{self, SimBackend};
use crate::backend::Backend;
use crate::console::visible;
use crate::error::{exit, Result};
use crate::suite::load;

/// `check SUITE --job-lines [--fabric]`: the lines a fleet job's node list records of the suite
/// its nodes run: its name, and the digest of the suite as they run it (`run --fabric` enables
/// the fabric check), which `fleet report` holds each node's evidence to.
pub fn cmd_job_lines(suite: &str, fabric: bool) -> Result<u8> {
    let mut loaded = load::load(suite)?;
    if fabric {
        super::run::enable_fabric(&mut loaded)?;
    }
    crate::fleet::gather::check_suite_name(&loaded.suite.name)
        .map_err(crate::error::InputError::Other)?;
    crate::out!("{}", job_lines(&loaded.suite));
    Ok(exit::PASS)
}

/// The node list's lines of `suite` (its name checked to be one a list can hold).
pub fn job_lines(suite: &crate::suite::Suite) -> String {
    format!(
        "# suite: {}\n# suite-sha256: {}\n",
        suite.name,
        crate::suite::resolved_sha256(suite)
    )
}

pub fn cmd_check(suite: &str, simulate: Option<String>) -> Result<u8> {
    super::note_if_shadowed("suite", suite, load::embedded(suite).is_some());
    let loaded = load::load(suite)?;
    let s = &loaded.suite;
    crate::outln!(
        "suite {} ({}), sha256 {}",
        visible(&s.name),
        visible(&loaded.origin),
        loaded.sha256
    );
    if loaded.chain.len() > 1 {
        crate::outln!(
            "extends: {}",
            loaded
                .chain
                .iter()
                .skip(1)
                .map(|c| visible(&c.name))
                .collect::<Vec<_>>()
                .join(" -> ")
        );
    }
    // Expand against a node: the simulated one if given, else the suite's own expectations.
    let simulated = simulate.is_some();
    let inv = match simulate {
        Some(spec) => {
            super::note_if_shadowed("simulated node", &spec, super::is_embedded_node(&spec));
            let mut b = SimBackend::new(sim::load_node(&spec)?, vec![], 1)?;
            b.inventory()?
        }
        None => expected_inventory(s),
    };
    // What cannot run as stated on this node is invalid input here, as `run` refuses it.
    crate::checks::check_suite_fits(&loaded, inv.gpus.len())?;
    // Valid only once it is known to run as stated on that node.
    crate::outln!("valid.");
    for c in &loaded.cautions {
        crate::outln!("caution: {}", visible(c));
    }
    crate::outln!(
        "plan on {} ({}):",
        visible(&inv.hostname),
        visible(&inv.summary())
    );
    let ctx = crate::checks::Ctx {
        suite: s,
        inventory: &inv,
        earlier: &[],
        simulated,
    };
    for (i, c) in crate::checks::from_suite(&loaded).iter().enumerate() {
        match c.plan(&ctx) {
            Ok(lines) => {
                crate::outln!("  {}. {} [{}]", i + 1, c.title(), c.id());
                for l in lines {
                    crate::outln!("       {}", visible(&l));
                }
            }
            Err(why) => crate::outln!(
                "  {}. {} [{}]: will be skipped: {}",
                i + 1,
                c.title(),
                c.id(),
                visible(&why)
            ),
        }
    }
    Ok(exit::PASS)
}

/// A node shaped as the suite expects, for `check` without a node.
fn expected_inventory(s: &crate::suite::Suite) -> crate::inventory::Inventory {
    let n = s.node.gpu_count.unwrap_or(1);
    let gpus = (0..n)
        .map(|i| crate::inventory::Gpu {
            index: i,
            name: s.node.gpu_model.clone().unwrap_or_else(|| "GPU".into()),
            ..Default::default()
        })
        .collect();
    let pairs = (0..n)
        .flat_map(|a| ((a + 1)..n).map(move |b| (a, b)))
        .map(|(a, b)| crate::inventory::GpuPair {
            a,
            b,
            nvlinks: s.topology.expected_links(a, b).unwrap_or(0),
            ..Default::default()
        })
        .collect();
    crate::inventory::Inventory {
        hostname: "the expected node".into(),
        gpus,
        pairs,
        ..Default::default()
    }
}
