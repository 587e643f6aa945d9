//! `nodecert render`: the reports again, from an evidence file.

use super::exit_for;
use super::output::{load_templates, open_report_dir, write_reports};
use crate::cli::ExportArgs;
use crate::error::{Error, InputError, Result};
use crate::evidence::Evidence;
use crate::sign;
use std::path::{Path, PathBuf};

pub fn cmd_render(
    evidence: &Path,
    out: Option<PathBuf>,
    templates: Option<&Path>,
    export: &ExportArgs,
) -> Result<u8> {
    let path = Evidence::path_in(evidence);
    let out = out.unwrap_or_else(|| {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    });
    if out.join(sign::MANIFEST_FILE).exists() {
        return Err(InputError::Other(format!(
            "{} holds a signed report; rendering into it would break its signature: choose another --out",
            out.display()
        ))
        .into());
    }
    export.check(&out, Some(&path))?;
    let pages = load_templates(templates, false)?;
    // Read once: judged, rendered, and compared with a folder's own evidence as these bytes.
    let (ev, text) = Evidence::read_text(&path).map_err(|e| Error::Input(InputError::Other(e)))?;
    if !export.force {
        another_report(&out, &path, text.as_bytes())?;
    }
    let dir = open_report_dir(&out, Some(sign::ReportKind::Node))?;
    // Pages rendered from the user's --templates carry no mark nodecert can read: with
    // --templates, the pages there are replaced as the user's own (never through a link).
    super::output::check_own_files(
        &dir,
        &out,
        &super::output::REPORT_FILES,
        Some(export.force || templates.is_some()),
    )?;
    write_reports(&ev, &dir, &pages, &Default::default())?;
    let tag = crate::console::simulated_tag(ev.simulated);
    crate::outln!(
        "rendered {} and {}{tag}",
        out.join("report.html").display(),
        out.join("report.md").display()
    );
    for p in export.write(&ev, &out, Some(&path))? {
        crate::outln!("wrote {}{tag}", p.display());
    }
    if let Some(t) = ev.shortfall_text() {
        crate::errln!("{}: {t}{tag}", ev.assess().label());
    }
    // As the run itself exits: a re-rendered failure or incomplete run is still one.
    Ok(exit_for(&ev))
}

/// Refuse a folder `out` whose pages would then describe what its own files are not: a node's
/// folder holding evidence other than `reading` (whose bytes are `text`: another run's; the same
/// bytes elsewhere are the same run). `--force` renders there anyway. (A fleet's folder is
/// refused whatever the flags, by [`open_report_dir`].)
fn another_report(out: &Path, reading: &Path, text: &[u8]) -> Result<()> {
    use crate::fsio::read::{read, Kind};
    let refuse = |why: String| -> Result<()> {
        Err(InputError::Other(format!(
            "{} {why}: its pages would not describe it; choose another --out, or add --force",
            out.display()
        ))
        .into())
    };
    let theirs = out.join(sign::EVIDENCE_FILE);
    if std::fs::symlink_metadata(&theirs).is_err()
        || crate::fsio::write::same_file(&theirs, reading)
    {
        return Ok(());
    }
    match read(&theirs, Kind::Evidence) {
        Ok(a) if a == text => Ok(()),
        _ => refuse(format!(
            "holds the evidence of another run ({})",
            sign::EVIDENCE_FILE
        )),
    }
}
