//! `nodecert sign`: sign a report folder, or countersign one.

use super::output::{dir_error, lock_dir};
use super::signer::{signed_as, Signer};
use crate::error::{exit, Error, InputError, Result};
use crate::fsio::write::Dir;
use crate::sign;
use sha2::Digest;
use std::path::Path;

pub fn cmd_sign(
    dir: &Path,
    signer: &Signer,
    allow_incomplete: bool,
    templates: Option<&Path>,
) -> Result<u8> {
    if !dir.is_dir() {
        return Err(InputError::Other(format!("{}: not a report folder", dir.display())).into());
    }
    if sign::ReportKind::of_folder(dir) == sign::ReportKind::Fleet {
        if templates.is_some() {
            return Err(InputError::Other(
                "--templates: a fleet report's pages have no templates of their own".into(),
            )
            .into());
        }
        return super::fleet::cmd_sign(dir, signer, allow_incomplete);
    }
    // Before anything is read: templates of one's own that cannot render are refused now.
    let pages = super::output::load_templates(templates, true)?;
    // No other nodecert writes here while the signature is made. The folder is reached through
    // no link of another user (root's and the signer's own links are followed).
    let lock = lock_dir(Dir::open_trusted(dir).map_err(|e| dir_error(dir, e))?)?;
    // Read as render does: a file whose records disagree (simulated) is refused here. Read
    // once, through the folder held (whatever its path names meanwhile), never through a link:
    // what is judged signable below is the bytes signed, or nothing is.
    let path = dir.join(crate::evidence::EVIDENCE_FILE);
    let text = lock
        .read_to_string(
            crate::evidence::EVIDENCE_FILE.as_ref(),
            crate::fsio::read::Kind::Evidence,
        )
        .map_err(|e| InputError::Other(format!("cannot read {}: {e}", path.display())))?;
    let ev = crate::evidence::Evidence::from_text(&path, &text).map_err(InputError::Other)?;
    let checked = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    // The verdict the file states may differ from the one its records give (`ev.verdict`): an
    // older nodecert called PASS what this one calls PARTIAL, and a version-1 file said PASS of
    // a run that never finished; those fall short, and are signed (as such) below. But a file
    // that says PASS (or PARTIAL, or anything but a failure) is read so by whoever reads it
    // without nodecert (`jq .verdict`): one whose own records fail, or could not test the node,
    // was edited, and is never sealed.
    let stated = crate::evidence::stated_verdict_in(&path, &text).map_err(InputError::Other)?;
    use crate::evidence::Verdict::{Error as Untestable, Fail};
    if let Some(s) = stated
        .filter(|s| matches!(ev.verdict, Fail | Untestable) && !matches!(s, Fail | Untestable))
    {
        return Err(InputError::Other(format!(
            "not signing {}: evidence.json states {}, but its records make it {} (the file \
             was edited); a signature would seal a file that says {}",
            crate::console::visible(&dir.display().to_string()),
            s.label(),
            ev.verdict.label(),
            s.label()
        ))
        .into());
    }
    // The first signature is the one made where no signature is: a manifest already there
    // (left by a signature that never finished, or written by someone else) seals nothing and
    // is written again, over the folder's own files.
    let first = sign::signatures_in_folder(&lock)
        .map_err(super::signer::sign_error)?
        .is_empty();
    if let Some(v) = ev.shortfall() {
        let why = ev.shortfall_text().unwrap_or_else(|| v.words().into());
        if !allow_incomplete {
            return Err(Error::Refused {
                message: format!(
                    "not signing {}: {why}; a signature would certify what was never checked \
                     (sign it as {} with --allow-incomplete)",
                    dir.display(),
                    v.words()
                ),
                code: v.exit_code(),
            });
        }
        if !first {
            crate::errln!(
                "warning: {} is already signed, so its reports cannot be rendered again: their \
                 title may not say that this run is {}",
                crate::console::visible(&dir.display().to_string()),
                v.words()
            );
        }
    } else if stated != Some(ev.verdict) {
        let shown = crate::console::visible(&dir.display().to_string());
        let is = ev.verdict.label();
        if first {
            let was = stated.map_or("no verdict", |v| v.label());
            crate::errln!(
                "note: {shown}: it states {was}, and its records make it {is} here; its reports \
                 say {is}"
            );
        } else {
            let was = stated.map_or("an unstated verdict", |v| v.label());
            crate::errln!(
                "warning: {shown} is already signed, so its reports cannot be rendered again: \
                 they were rendered as {was}, and its records make it {is} here"
            );
        }
    }
    // The first signature renders the pages again from the evidence it judged, as `run
    // --sign-key` writes them: they name the signer and say the verdict of the records (and
    // "signed as ..." for a run that fell short), whatever pages were found here. What they were,
    // and an unsigned manifest found here, are put back (or removed, where there were none) if
    // the signature then fails.
    let saved = first
        .then(|| {
            super::output::keep_for_first_signature(
                &lock,
                dir,
                &super::output::REPORT_FILES,
                crate::fsio::read::Kind::Evidence,
                "the folder's files",
            )
        })
        .transpose()?;
    let signed = (|| {
        if first {
            let signing = signer.signing_of(dir, checked.clone(), signed_as(&ev));
            let rendered = pages.render(&ev, &signing).map_err(InputError::from)?;
            // Pages of one's own templates are replaced only by what the signer asked for.
            let found = saved.as_ref().is_some_and(|s| s.any_present());
            if found && templates.is_none() {
                crate::errln!(
                    "note: {}: its reports are rendered again from evidence.json to name the \
                     signature (embedded templates; --templates DIR for your own)",
                    crate::console::visible(&dir.display().to_string())
                );
            }
            super::output::write_rendered(&lock, rendered)?;
        }
        signer.sign(&lock, &checked)
    })();
    let info = super::output::restore_on_error(saved, &lock, signed)?;
    let simulated = lock
        .open_file(sign::MANIFEST_FILE.as_ref())
        .and_then(|f| crate::fsio::read::read_limited(f, 4 << 20, "a manifest"))
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| sign::Manifest::parse(&t).ok())
        .is_some_and(|m| m.simulated);
    crate::out!("{}", signer.signed_text(dir, &info, simulated));
    Ok(exit::PASS)
}
