//! `nodecert run`: measure the node against a suite, write evidence and reports, sign.

use super::output::{open_report_dir, write_reports};
use super::signer::Signer;
use super::{backend, environment, exit_for};
use crate::backend::sim::{self, SimBackend};
use crate::backend::Backend;
use crate::cli::ExportArgs;
use crate::error::{Error, InputError, Result};
use crate::evidence::{Environment, Evidence, SimulationRecord};
use crate::sign;
use crate::suite::load::{self, LoadedSuite};
use std::path::Path;

fn pick_suite(suite: Option<String>, inv: &crate::inventory::Inventory) -> Result<LoadedSuite> {
    match suite {
        Some(s) => Ok(load::load(&s)?),
        None => {
            let name = inv.gpus.first().map(|g| g.name.clone()).unwrap_or_default();
            let virt = !matches!(
                inv.virtualization.mode,
                crate::inventory::VirtMode::BareMetal
            );
            let pick = load::matching_embedded(&name, inv.gpus.len(), virt).ok_or_else(|| {
                InputError::Other(format!(
                    "no embedded suite matches this node ({}); name a suite file or one of: {}",
                    inv.summary(),
                    load::EMBEDDED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            Ok(load::load(pick)?)
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn cmd_run(
    suite: Option<String>,
    simulate: Option<String>,
    inject: Vec<String>,
    seed: u64,
    out: &Path,
    templates: Option<&Path>,
    quiet: bool,
    signer: Option<(&Signer, bool)>,
    export: &ExportArgs,
    args: &[String],
) -> Result<u8> {
    // Validate what the user gave before touching hardware.
    if out.join(sign::MANIFEST_FILE).exists() {
        return Err(InputError::Other(format!(
            "{} holds a signed report ({}); refusing to overwrite it: choose another --out",
            out.display(),
            sign::MANIFEST_FILE
        ))
        .into());
    }
    let pre_loaded = match &suite {
        Some(s) => Some(load::load(s)?),
        None => None,
    };
    export.check(out, None)?;
    if let Some(t) = templates {
        // Fail early on broken templates rather than after a long run.
        crate::report::render(
            &sample_evidence_for_templates(),
            Some(t),
            &Default::default(),
        )
        .map_err(Error::Render)?;
    }
    let (mut b, simrec) = backend(simulate.as_deref(), &inject, seed)?;
    let inv = b.inventory()?;
    let loaded = match (pre_loaded, &simrec) {
        (Some(l), _) => l,
        // A simulated node is a shipped SKU: its suite is the one of the same name, whatever
        // faults do to the GPU count.
        (None, Some(rec)) if load::embedded(&rec.node).is_some() => load::load(&rec.node)?,
        (None, _) => pick_suite(None, &inv)?,
    };
    // Held until the run ends: no other nodecert writes here meanwhile.
    let dir = open_report_dir(out)?;
    let evidence_path = out.join(crate::evidence::EVIDENCE_FILE);
    let mut console = crate::console::Console::new(quiet);
    let color = console.color();
    if !quiet {
        crate::errln!(
            "nodecert {}: suite {} on {} ({}){}",
            env!("CARGO_PKG_VERSION"),
            crate::console::visible(&loaded.suite.name),
            crate::console::visible(&inv.hostname),
            crate::console::visible(&inv.summary()),
            if simrec.is_some() { " [SIMULATED]" } else { "" }
        );
    }
    let ev = crate::runner::new_evidence(&loaded, b.as_ref(), inv, simrec, environment(args));
    let ev = crate::runner::run(&loaded, b.as_mut(), ev, Some(&evidence_path), &mut console)
        .map_err(|e| Error::Write {
            path: evidence_path.clone(),
            source: e,
        })?;
    // A run that judged nothing is not signed unless the signer says so (--allow-incomplete).
    let refused = match (signer, ev.shortfall()) {
        (Some((_, false)), Some(v)) => Some(v),
        _ => None,
    };
    let signer = signer.filter(|_| refused.is_none()).map(|(s, _)| s);
    let signing = match signer {
        Some(s) => s.signing(out, &ev)?,
        None => Default::default(),
    };
    write_reports(&ev, &dir, templates, &signing)?;
    let signed = match signer {
        Some(s) => Some(s.sign(out)?),
        None => None,
    };
    let exported = export.write(&ev)?;
    if quiet {
        crate::outln!(
            "{}: {} ({})",
            ev.assess().label(),
            crate::console::visible(&ev.suite.name),
            if ev.simulated {
                "simulated"
            } else {
                "measured"
            }
        );
    } else {
        crate::out!("{}", crate::console::summary(&ev, color));
        crate::outln!("evidence and reports in {}", out.display());
        for p in exported {
            crate::outln!("wrote {}", p.display());
        }
    }
    if let (Some(s), Some(info)) = (signer, signed) {
        let text = s.signed_text(out, &info, ev.simulated);
        match quiet {
            true => crate::outln!("{}", text.lines().next().unwrap_or_default()),
            false => crate::out!("{text}"),
        }
    }
    if let Some(v) = refused {
        crate::errln!(
            "error: not signed: {}; sign it anyway with `nodecert sign {} --key KEY --allow-incomplete`",
            ev.shortfall_text().unwrap_or_else(|| v.words().into()),
            out.display()
        );
    }
    Ok(exit_for(&ev))
}

/// A tiny evidence used to try user templates before a run.
fn sample_evidence_for_templates() -> Evidence {
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
    let rec = SimulationRecord {
        node: "h200-vm-1".into(),
        seed: 1,
        faults: vec![],
    };
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent)
        .expect("no io without a path")
}
