//! `nodecert run`: measure the node against a suite, write evidence and reports, sign.

use super::output::{load_templates, open_report_dir, write_rendered, REPORT_FILES};
use super::signer::Signer;
use super::{backend, environment, exit_for};
use crate::cli::ExportArgs;
use crate::error::{Error, InputError, Result};
use crate::evidence::Evidence;
use crate::sign;
use crate::suite::load::{self, LoadedSuite};
use std::path::Path;

pub(crate) fn pick_suite(
    suite: Option<String>,
    inv: &crate::inventory::Inventory,
) -> Result<LoadedSuite> {
    match suite {
        Some(s) => Ok(load::load(&s)?),
        None => {
            let name = inv.gpus.first().map(|g| g.name.clone()).unwrap_or_default();
            let virt = !matches!(
                inv.virtualization.mode,
                crate::inventory::VirtMode::BareMetal
            );
            // Lost GPUs NVML could not hand out are not among those listed; one lost after it
            // was listed is (and is counted there).
            let unlisted = inv.lost_gpus.iter().filter(|l| l.index.is_none()).count();
            let all_visible = std::env::var_os("CUDA_VISIBLE_DEVICES").is_none();
            let pick = load::matching_embedded(&name, inv.gpus.len(), unlisted, virt, all_visible)
                .ok_or_else(|| {
                    InputError::Other(format!(
                        "no embedded suite matches this node ({}); name a suite file (`nodecert \
                     inventory --as-suite FILE` writes one that expects this node) or one of: {}",
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

/// The suite a run uses: the one given; on a simulated node (a shipped SKU) the suite of the
/// same name, whatever faults do to the GPU count; else the embedded one matching the node.
pub(crate) fn suite_for(
    given: Option<LoadedSuite>,
    simrec: Option<&crate::evidence::SimulationRecord>,
    inv: &crate::inventory::Inventory,
) -> Result<LoadedSuite> {
    Ok(match (given, simrec) {
        (Some(l), _) => l,
        (None, Some(rec)) if load::embedded(&rec.node).is_some() => load::load(&rec.node)?,
        (None, _) => pick_suite(None, inv)?,
    })
}

/// `run --fabric`: the suite's `[checks.fabric]`, enabled (its floors are the suite's: a suite
/// that states none cannot judge the fabric, and says so before anything runs).
pub(crate) fn enable_fabric(loaded: &mut LoadedSuite) -> Result<()> {
    match loaded.suite.checks.fabric.as_mut() {
        Some(f) if f.pair_busbw_gbps.judging().fail_below.is_some() => {
            f.enabled = true;
            Ok(())
        }
        _ => Err(InputError::Other(format!(
            "--fabric: suite {} states no [checks.fabric] pair_busbw_gbps floor to judge the fabric by (the HGX suites do; add one)",
            loaded.suite.name
        ))
        .into()),
    }
}

#[allow(clippy::too_many_arguments)]
pub fn cmd_run(
    suite: Option<String>,
    simulate: Option<String>,
    inject: Vec<String>,
    seed: u64,
    node_name: Option<String>,
    fabric: bool,
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
        Some(s) => {
            super::note_if_shadowed("suite", s, load::embedded(s).is_some());
            Some(load::load(s)?)
        }
        None => None,
    };
    export.check(out, None)?;
    // Fail on a broken template now rather than after a long run.
    let pages = load_templates(templates, signer.is_some())?;
    let (mut b, simrec) = backend(simulate.as_deref(), &inject, seed, node_name.as_deref())?;
    let inv = b.inventory()?;
    let mut loaded = suite_for(pre_loaded, simrec.as_ref(), &inv)?;
    if fabric {
        enable_fabric(&mut loaded)?;
    }
    crate::checks::check_suite_fits(&loaded, inv.gpus.len())?;
    // Held until the run ends: no other nodecert writes here meanwhile.
    let dir = open_report_dir(out, Some(crate::sign::ReportKind::Node))?;
    let evidence_path = out.join(crate::evidence::EVIDENCE_FILE);
    // Before the run: the folder's own files are nodecert's or refused (a link there, or
    // someone's notes in report.md), and an earlier run's pages are removed, so that no page
    // outlives the evidence it was rendered from: a run that stops early (an export refused,
    // the node lost, the process killed) leaves its own evidence and no page saying PASS.
    let mut own = vec![crate::evidence::EVIDENCE_FILE];
    own.extend(REPORT_FILES);
    super::output::check_own_files(&dir, out, &own, Some(export.force))?;
    for name in REPORT_FILES {
        dir.remove(name.as_ref()).map_err(|source| Error::Write {
            path: out.join(name),
            source,
        })?;
    }
    let mut console = crate::console::Console::new(quiet, simrec.is_some());
    let color = console.color();
    if !quiet {
        crate::errln!(
            "nodecert {}: suite {} on {} ({}){}",
            env!("CARGO_PKG_VERSION"),
            crate::console::visible(&loaded.suite.name),
            crate::console::visible(&inv.hostname),
            crate::console::visible(&inv.summary()),
            crate::console::simulated_tag(simrec.is_some())
        );
    }
    // Said even with -q: what the suite states and does not judge.
    for c in &loaded.cautions {
        crate::errln!(
            "caution: {}{}",
            crate::console::visible(c),
            crate::console::simulated_tag(simrec.is_some())
        );
    }
    // Said even with -q: settings of nodecert's environment it ran without, and why.
    for s in crate::platform::cuda_env::set_aside_at_start() {
        crate::errln!(
            "note: set aside for this run, as it would change what is measured: {}{}",
            crate::console::visible(&s.describe()),
            crate::console::simulated_tag(simrec.is_some())
        );
    }
    let ev = crate::runner::new_evidence(&loaded, b.as_ref(), inv, simrec, environment(args));
    let ev =
        crate::runner::run(&loaded, b.as_mut(), ev, Some(&dir), &mut console).map_err(|e| {
            Error::Write {
                path: evidence_path.clone(),
                source: e,
            }
        })?;
    // A run that judged nothing is not signed unless the signer says so (--allow-incomplete).
    let refused = match (signer, ev.shortfall()) {
        (Some((_, false)), Some(v)) => Some(v),
        _ => None,
    };
    let signer = signer.filter(|_| refused.is_none()).map(|(s, _)| s);
    // What is signed is the evidence as this run wrote it, the bytes judged signable above.
    let checked = match signer {
        Some(_) => {
            let json = ev.to_json().map_err(|source| Error::Write {
                path: evidence_path.clone(),
                source,
            })?;
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(json.as_bytes()))
        }
        None => String::new(),
    };
    let signing = match signer {
        Some(s) => s.signing_of(out, checked.clone(), super::signer::signed_as(&ev)),
        None => Default::default(),
    };
    let rendered = match pages.render(&ev, &signing) {
        Ok(r) => r,
        Err(e) => {
            // The run is complete and its evidence saved; only its pages are missing (an
            // earlier run's went before the first check; what is there now is not nodecert's).
            let exported = export.write(&ev, out, None)?;
            if !quiet {
                crate::out!("{}", crate::console::summary(&ev, color));
                for p in exported {
                    crate::outln!("wrote {}", p.display());
                }
            }
            return Err(not_rendered(
                e,
                &ev,
                out,
                templates,
                signer.map(|s| s.key()),
            ));
        }
    };
    // The pages are written only where no one's file appeared at their names while the run
    // went on (the earlier run's were removed before it); nothing is signed otherwise.
    let unclaimed = || super::output::check_pages_unclaimed(&dir, out, export.force);
    // Before the pages and the signature: an export into the report folder itself is then not
    // refused as a file of a signed folder (it is not listed in the manifest either way), and
    // an export that fails leaves no page naming a signature.
    let exported = match export.write(&ev, out, None) {
        Ok(p) => p,
        Err(e) => {
            // The run is complete and its evidence saved; its pages are written too, naming no
            // signature (nothing is signed), and the error is the export's.
            let unsigned = match signer {
                None => Ok(rendered),
                Some(_) => pages.render(&ev, &Default::default()),
            };
            // The export's error is the one told; a page someone put here meanwhile is said
            // beside it, and left as it is.
            if let Ok(r) = unsigned {
                match unclaimed() {
                    Ok(()) => write_rendered(&dir, r)?,
                    Err(p) => crate::errln!("error: {}", p.console_text()),
                }
            }
            if !quiet {
                crate::out!("{}", crate::console::summary(&ev, color));
            }
            return Err(e);
        }
    };
    if let Err(e) = unclaimed() {
        if !quiet {
            crate::out!("{}", crate::console::summary(&ev, color));
        }
        return Err(e);
    }
    let signed = match signer {
        None => {
            write_rendered(&dir, rendered)?;
            None
        }
        Some(s) => match write_rendered(&dir, rendered).and_then(|()| s.sign(&dir, &checked)) {
            Ok(info) => Some(info),
            Err(e) => {
                // Nothing was signed: no page may name the signature. They are rendered again
                // without it, or removed where that fails (the error told is the signature's).
                let unsigned = pages
                    .render(&ev, &Default::default())
                    .map_err(|_| ())
                    .and_then(|r| write_rendered(&dir, r).map_err(|_| ()));
                if unsigned.is_err() {
                    for name in REPORT_FILES {
                        let _ = dir.remove(name.as_ref());
                    }
                }
                return Err(e);
            }
        },
    };
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
        let tag = crate::console::simulated_tag(ev.simulated);
        crate::outln!("evidence and reports in {}{tag}", out.display());
        for p in exported {
            crate::outln!("wrote {}{tag}", p.display());
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
            crate::console::visible(&ev.shortfall_text().unwrap_or_else(|| v.words().into())),
            crate::console::visible(&out.display().to_string())
        );
    }
    Ok(exit_for(&ev))
}

/// A complete run whose reports could not be rendered: what is kept, what is not, and the
/// commands that finish the job once the template is fixed. Exit 2: the template is the input
/// that is wrong; the node's verdict is in the evidence and on the console.
fn not_rendered(
    e: crate::report::TemplateError,
    ev: &Evidence,
    out: &Path,
    templates: Option<&Path>,
    key: Option<&Path>,
) -> Error {
    let evidence = out.join(crate::evidence::EVIDENCE_FILE);
    // The template's message is one line of its own: a line break in it (a template's own
    // text) is escaped with the rest, not taken for one of these.
    let mut lines =
        vec![
            e.to_string(),
            format!(
            "the run finished ({}) and its evidence is kept in {}, but its reports could not be \
             rendered{}; {} then render them with:",
            ev.assess().label(),
            evidence.display(),
            if key.is_some() { ", so it was not signed" } else { "" },
            if e.user {
                "fix the template,"
            } else {
                "(nodecert's own template failed: please report it)"
            },
        ),
        ];
    let with = match templates {
        Some(t) => format!(" --templates {}", t.display()),
        None => String::new(),
    };
    lines.push(format!("  nodecert render {}{with}", evidence.display()));
    if let Some(k) = key {
        lines.push("and sign with:".into());
        lines.push(format!(
            "  nodecert sign {} --key {}{with}",
            out.display(),
            k.display()
        ));
    }
    Error::Input(InputError::Lines(lines))
}
