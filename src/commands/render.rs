//! `nodecert render`: the reports again, from an evidence file.

use super::output::{load_templates, open_report_dir, write_reports};
use super::{exit_for, read_evidence};
use crate::cli::ExportArgs;
use crate::error::{InputError, Result};
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
    let (_, ev) = read_evidence(evidence)?;
    let dir = open_report_dir(&out)?;
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
