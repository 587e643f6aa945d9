//! `nodecert sign`: sign a report folder, or countersign one.

use super::output::{dir_error, lock_dir, write_reports};
use super::signer::{signed_as, Signer};
use crate::error::{exit, Error, InputError, Result};
use crate::fsio::write::Dir;
use crate::sign;
use sha2::Digest;
use std::path::Path;

pub fn cmd_sign(dir: &Path, signer: &Signer, allow_incomplete: bool) -> Result<u8> {
    if !dir.is_dir() {
        return Err(InputError::Other(format!("{}: not a report folder", dir.display())).into());
    }
    if sign::ReportKind::of_folder(dir) == sign::ReportKind::Fleet {
        return super::fleet::cmd_sign(dir, signer, allow_incomplete);
    }
    // No other nodecert writes here while the signature is made. The folder is reached through
    // no link of another user (root's and the signer's own links are followed).
    let lock = lock_dir(Dir::open_trusted(dir).map_err(|e| dir_error(dir, e))?)?;
    // Read as render does: a file whose records disagree (simulated) is refused here. Read
    // once: what is judged signable below is the bytes signed, or nothing is.
    let path = crate::evidence::Evidence::path_in(dir);
    let (ev, text) = crate::evidence::Evidence::read_text(&path)
        .map_err(|e| Error::Input(InputError::Other(e)))?;
    let checked = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    // The verdict the file states is what its pages were rendered with; the one its records
    // give (`ev.verdict`) may differ, as when an older nodecert called PASS what this one calls
    // PARTIAL. A signature must not seal pages that say the stale one; pages rendered again
    // since (`nodecert render DIR --templates T --out DIR`, which leaves evidence.json as it
    // is) that say the verdict the records give are kept.
    let stated = crate::evidence::stated_verdict_in(&path, &text).map_err(InputError::Other)?;
    let page_says = |name: &str| {
        crate::fsio::read::read_to_string(&dir.join(name), crate::fsio::read::Kind::Evidence)
            .is_ok_and(|t| t.contains(ev.verdict.label()))
    };
    let pages_say_it = super::output::REPORT_FILES.iter().all(|n| page_says(n));
    let stale = (stated != Some(ev.verdict) && !pages_say_it).then(|| {
        format!(
            "its pages were rendered as {}, and its records make it {} here",
            stated.map_or("an unstated verdict", |v| v.label()),
            ev.verdict.label()
        )
    });
    // Whether this first signature renders the pages again (a run signed as incomplete, or
    // pages that say a stale verdict), with what they then say of it.
    let mut rerender = false;
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
        if dir.join(sign::MANIFEST_FILE).exists() {
            crate::errln!(
                "warning: {} is already signed, so its reports cannot be rendered again: their \
                 title may not say that this run is {}",
                crate::console::visible(&dir.display().to_string()),
                v.words()
            );
        } else {
            // The first signature: the reports are rendered again, titled "signed as ...".
            rerender = true;
        }
    } else if let Some(why) = stale {
        if dir.join(sign::MANIFEST_FILE).exists() {
            crate::errln!(
                "warning: {} is already signed, so its reports cannot be rendered again: {why}",
                crate::console::visible(&dir.display().to_string())
            );
        } else {
            // The embedded templates: the pages of this first signature say the verdict the
            // records give.
            crate::errln!(
                "note: {}: {why}; rendering its reports again (embedded templates) before signing",
                crate::console::visible(&dir.display().to_string())
            );
            rerender = true;
        }
    }
    // The pages as they are, put back as they were (or removed, where there were none) if the
    // signature they are rendered to name then fails.
    let saved = rerender.then(|| {
        super::output::SavedPages::of(
            &lock,
            &super::output::REPORT_FILES,
            crate::fsio::read::Kind::Evidence,
        )
    });
    let signed = (|| {
        if rerender {
            let signing = signer.signing_of(dir, checked.clone(), signed_as(&ev));
            let pages = crate::report::Templates::load(None).map_err(InputError::from)?;
            write_reports(&ev, &lock, &pages, &signing)?;
        }
        signer.sign(&lock, &checked)
    })();
    let info = super::output::restore_on_error(saved, &lock, signed)?;
    let simulated = crate::fsio::read::open(&info.manifest, false)
        .and_then(|f| crate::fsio::read::read_limited(f, 4 << 20, "a manifest"))
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| sign::Manifest::parse(&t).ok())
        .is_some_and(|m| m.simulated);
    crate::out!("{}", signer.signed_text(dir, &info, simulated));
    Ok(exit::PASS)
}
