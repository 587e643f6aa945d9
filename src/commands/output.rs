//! Writing what commands produce: report folders (created, locked, never a signed one), the
//! reports in them, and the exports beside them (--junit, --prometheus).

use crate::cli::ExportArgs;
use crate::error::{Error, InputError, Result};
use crate::evidence::Evidence;
use crate::fsio::write::{Dir, LockedDir};
use crate::report::Templates;
use crate::sign;
use std::path::{Path, PathBuf};

impl ExportArgs {
    pub(crate) fn outputs(&self) -> Vec<(&Path, Box<dyn crate::export::Exporter>)> {
        let mut v: Vec<(&Path, Box<dyn crate::export::Exporter>)> = Vec::new();
        if let Some(p) = &self.junit {
            v.push((p, Box::new(crate::export::junit::Junit)));
        }
        if let Some(p) = &self.prometheus {
            v.push((p, Box::new(crate::export::prometheus::Prometheus)));
        }
        v
    }

    /// Fail before a long run when an output could not or must not be written: its folder must
    /// exist and the target be absent or a regular file; it must not be one of the files of the
    /// report folder `out` or the evidence read (`reading`); without --force, it must not be in a
    /// signed folder nor replace a file that is not an earlier output of its kind. [`Self::write`]
    /// checks each again just before writing it.
    pub(crate) fn check(&self, out: &Path, reading: Option<&Path>) -> Result<()> {
        for (path, e) in self.outputs() {
            self.check_one(path, e.as_ref(), out, reading)?;
        }
        Ok(())
    }

    fn check_one(
        &self,
        path: &Path,
        e: &dyn crate::export::Exporter,
        out: &Path,
        reading: Option<&Path>,
    ) -> Result<()> {
        let flag = e.flag();
        let refuse = |why: String| -> Result<()> {
            Err(Error::Input(InputError::Other(format!(
                "{flag} {}: {why}",
                path.display()
            ))))
        };
        if let Err(why) = crate::fsio::write::check_target(path) {
            return refuse(why.to_string());
        }
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let own = sign::DEFAULT_FILES.contains(&name) || name.starts_with(sign::MANIFEST_FILE);
        if own && crate::fsio::write::same_dir(dir, out) {
            return refuse(format!(
                "is one of the report's own files in {}: choose another file",
                out.display()
            ));
        }
        if reading.is_some_and(|r| crate::fsio::write::same_file(r, path)) {
            return refuse("is the evidence being read: choose another file".into());
        }
        if self.force {
            return Ok(());
        }
        if dir.join(sign::MANIFEST_FILE).exists() {
            return refuse(format!(
                "{} holds a signed report; add --force to write there anyway",
                dir.display()
            ));
        }
        if let Ok(f) = crate::fsio::read::open(path, false) {
            let head = read_head(f).unwrap_or_default();
            if !head.is_empty() && !crate::export::is_previous_output(e, &head) {
                return refuse(format!(
                    "exists and is not an earlier {flag} output; add --force to replace it"
                ));
            }
        }
        Ok(())
    }

    /// Write every output asked for; returns the paths written. Each is checked again as
    /// [`Self::check`] did before the run, just before it is written: a folder signed or a
    /// file put at the target during the run is not overwritten either.
    pub(crate) fn write(
        &self,
        ev: &Evidence,
        out: &Path,
        reading: Option<&Path>,
    ) -> Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        for (path, e) in self.outputs() {
            self.check_one(path, e.as_ref(), out, reading)?;
            crate::export::write(e.as_ref(), ev, path).map_err(|source| Error::Write {
                path: path.to_path_buf(),
                source,
            })?;
            written.push(path.to_path_buf());
        }
        Ok(written)
    }
}

/// The report files a report folder holds beside its evidence.
pub const REPORT_FILES: [&str; 2] = ["report.html", "report.md"];

/// What of a file is read to tell whether nodecert wrote it.
const HEAD: u64 = 4096;

/// The start of the file `f` (at most [`HEAD`] bytes), as text.
fn read_head(f: std::fs::File) -> std::io::Result<String> {
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, HEAD), &mut b)?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

/// Whether `head`, the start of a JSON file as nodecert writes it (pretty or compact), states
/// the format `format`.
fn states_format(head: &str, format: &str) -> bool {
    head.contains(&format!("\"format\": \"{format}\""))
        || head.contains(&format!("\"format\":\"{format}\""))
}

/// Whether `head`, the start of the file `name`, is what nodecert writes under that name with
/// its own templates (a page of `--templates` of the user's carries no such mark: it is
/// replaced beside nodecert evidence, or with `--force`).
fn is_own_output(name: &str, head: &str) -> bool {
    match name {
        crate::evidence::EVIDENCE_FILE => states_format(head, crate::evidence::FORMAT_NAME),
        "report.html" => head.contains("<meta name=\"nodecert-format-version\""),
        "report.md" => head.contains("# nodecert certificate: "),
        "diff.html" => head.contains("<title>") && head.contains("nodecert diff: "),
        "diff.md" => head.contains("# nodecert diff: "),
        "fleet.json" => states_format(head, crate::fleet::FORMAT),
        "fleet.html" => head.contains("<title>") && head.contains("nodecert fleet: "),
        "fleet.md" => head.contains("# nodecert fleet: "),
        "fleet-junit.xml" => {
            head.contains("<testsuites name=\"") && head.contains("nodecert fleet\"")
        }
        "fleet.prom" => {
            crate::export::is_previous_output(&crate::export::prometheus::Prometheus, head)
        }
        _ => false,
    }
}

/// Before a command writes the files `names` into the folder it holds (`dir`, shown as `out`),
/// and before any work: each must be absent or a regular file (a link, a FIFO or a device is
/// refused now, not after a long run), and one that nodecert did not write is not replaced:
/// evidence.json must be nodecert evidence, and a page must stand beside nodecert evidence or
/// carry the mark of nodecert's own templates. A folder chosen by mistake (someone's notes in
/// report.md) is refused, exit 2. `force`: whether `--force` was given, None for a command
/// that has no such flag.
pub(crate) fn check_own_files(
    dir: &Dir,
    out: &Path,
    names: &[&str],
    force: Option<bool>,
) -> Result<()> {
    check_own_files_beside(dir, out, crate::evidence::EVIDENCE_FILE, names, force)
}

/// [`check_own_files`] of a folder whose evidence is `evidence` (`evidence.json` of a node's
/// report, `fleet.json` of a fleet's): its other files are nodecert's beside it.
pub(crate) fn check_own_files_beside(
    dir: &Dir,
    out: &Path,
    evidence: &str,
    names: &[&str],
    force: Option<bool>,
) -> Result<()> {
    let head = file_head(dir, out);
    // The folder's evidence, where this command does not write it, only says whether the
    // pages stand beside nodecert evidence: one that cannot be read (a link to the evidence
    // being rendered) is no evidence beside them, not an error.
    let theirs = match head(evidence) {
        Err(_) if !names.contains(&evidence) => None,
        r => r?,
    };
    let beside_evidence = theirs
        .as_deref()
        .is_some_and(|h| is_own_output(evidence, h));
    for &name in names {
        let Some(h) = (if name == evidence {
            theirs.clone()
        } else {
            head(name)?
        }) else {
            continue;
        };
        if force == Some(true) || h.is_empty() {
            continue;
        }
        if !(is_own_output(name, &h) || (name != evidence && beside_evidence)) {
            return Err(InputError::Other(format!(
                "{}: exists and is not a file nodecert wrote; choose another --out{}",
                shown(out, name),
                if force.is_some() {
                    ", or add --force to replace it"
                } else {
                    ""
                }
            ))
            .into());
        }
    }
    Ok(())
}

fn shown(out: &Path, name: &str) -> String {
    crate::console::visible(&out.join(name).display().to_string())
}

/// The start of the file `name` of the folder held (`dir`, shown as `out`), through the folder
/// and never a link: None where nothing is there; the error of reading it where something is
/// that is not a regular file (or cannot be read). An error looking at the folder is the
/// command's.
fn head_of(dir: &Dir, out: &Path, name: &str) -> Result<Option<std::io::Result<String>>> {
    match dir.exists(name.as_ref()) {
        Ok(false) => Ok(None),
        Ok(true) => Ok(Some(dir.open_file(name.as_ref()).and_then(read_head))),
        Err(e) => Err(dir_error(out, e)),
    }
}

/// [`head_of`], where something that cannot be read is refused: choose another --out.
fn file_head<'a>(dir: &'a Dir, out: &'a Path) -> impl Fn(&str) -> Result<Option<String>> + 'a {
    move |name: &str| {
        head_of(dir, out, name)?.transpose().map_err(|e| {
            InputError::Other(format!("{}: {e}: choose another --out", shown(out, name))).into()
        })
    }
}

/// Just before `run` writes its pages, whose earlier ones it removed before its first check:
/// a page there now appeared during the run, and is replaced only where it is a regular file
/// that carries the mark of nodecert's own templates (or with `--force`, `force`). Someone's
/// file that appeared beside this run's evidence is left as it is (exit 2), and the run's
/// evidence is kept. A manifest, which the run refused to find before it started, appeared
/// too: what someone else listed is not signed.
pub(crate) fn check_pages_unclaimed(dir: &Dir, out: &Path, force: bool) -> Result<()> {
    let mut first = None;
    for name in REPORT_FILES {
        first = match head_of(dir, out, name)? {
            None => continue,
            Some(Ok(h)) if force || h.is_empty() || is_own_output(name, &h) => continue,
            Some(Ok(_)) => Some(format!("{} is not a file nodecert wrote", shown(out, name))),
            Some(Err(e)) => Some(format!("{}: {e}", shown(out, name))),
        };
        break;
    }
    // A signature without a manifest is never signed beside (the signature refuses it).
    if first.is_none()
        && dir
            .exists(crate::sign::MANIFEST_FILE.as_ref())
            .unwrap_or(true)
    {
        let m = shown(out, crate::sign::MANIFEST_FILE);
        first = Some(format!("{m} is not a file this run wrote"));
    }
    let Some(first) = first else {
        return Ok(());
    };
    let evidence = shown(out, crate::evidence::EVIDENCE_FILE);
    Err(InputError::Lines(vec![
        format!(
            "{first}, and appeared while the run went on: it is left as it is, and this run's \
             pages are not written (nor signed)"
        ),
        format!(
            "the run finished and its evidence is kept in {evidence}; render its pages \
             elsewhere with:"
        ),
        format!("  nodecert render {evidence} --out DIR"),
    ])
    .into())
}

/// Render the reports of `ev` and write them into `dir`. A template that fails is invalid
/// input (exit 2), named with its file, line and column.
pub fn write_reports(
    ev: &Evidence,
    dir: &Dir,
    templates: &Templates,
    signing: &crate::report::Signing,
) -> Result<()> {
    let r = templates.render(ev, signing).map_err(InputError::from)?;
    write_rendered(dir, r)
}

/// Write rendered reports into `dir`.
pub fn write_rendered(dir: &Dir, r: crate::report::Rendered) -> Result<()> {
    let [html, md] = REPORT_FILES;
    write_files(dir, [(html, r.html), (md, r.markdown)])
}

/// Read and parse the report templates (`--templates DIR`, or the embedded ones); with a
/// folder, also render them once against a sample evidence (with a signature when `signed`),
/// so that a template that reads a field evidence does not have fails now, not after a run.
pub fn load_templates(dir: Option<&Path>, signed: bool) -> Result<Templates> {
    let t = Templates::load(dir).map_err(InputError::from)?;
    if t.any_user() {
        let signing = match signed {
            true => crate::report::Signing {
                fingerprint: Some("SHA256:sample".into()),
                evidence_sha256: Some("0".repeat(64)),
                verify_command: Some("ssh-keygen -Y verify ...".into()),
                signed_as: None,
            },
            false => Default::default(),
        };
        // Tried for what it can render; whether a simulated run's page says so is asked of
        // the real evidence (a template for hardware runs need not).
        t.try_render(&super::sample_evidence_for_templates(), &signing)
            .map_err(InputError::from)?;
    }
    Ok(t)
}

/// Write each (name, body) into `dir`.
pub(crate) fn write_files<const N: usize>(dir: &Dir, files: [(&str, String); N]) -> Result<()> {
    for (name, body) in files {
        dir.replace(name.as_ref(), body.as_bytes())
            .map_err(|e| Error::Write {
                path: dir.path().join(name),
                source: e,
            })?;
    }
    Ok(())
}

/// Pages of a folder as they are before a command renders them again to name a signature: put
/// back as they were, byte for byte, when the signature then fails, so that no page names a
/// signature that was never made and no file of the user's is lost. A page that was not there
/// is removed instead.
pub(crate) struct SavedPages(Vec<(&'static str, Option<Vec<u8>>)>);

impl SavedPages {
    /// The pages `names` of `dir`, each read (bounded as `kind`) through the folder, never
    /// through a link. One that is there but cannot be read back (larger than the bound, not a
    /// regular file) is an error before anything is written: it could not be put back.
    pub(crate) fn of(
        dir: &Dir,
        names: &[&'static str],
        kind: crate::fsio::read::Kind,
    ) -> Result<SavedPages> {
        let mut out = Vec::new();
        for &n in names {
            let path = dir.path().join(n);
            if path.symlink_metadata().is_err() {
                out.push((n, None));
                continue;
            }
            let bytes = crate::fsio::read::open(&path, false)
                .and_then(|f| crate::fsio::read::read_limited(f, kind.limit(), "a report page"))
                .map_err(|e| {
                    InputError::Other(format!(
                        "{}: cannot be kept to put back if the signature fails ({e}); nothing \
                         was written",
                        path.display()
                    ))
                })?;
            out.push((n, Some(bytes)));
        }
        Ok(SavedPages(out))
    }

    /// Whether any of the pages was there.
    pub(crate) fn any_present(&self) -> bool {
        self.0.iter().any(|(_, t)| t.is_some())
    }

    /// Write the pages back, and remove those that were not there (best effort: the failure
    /// being told is the signature's).
    pub(crate) fn restore(self, dir: &Dir) {
        for (name, bytes) in self.0 {
            let _ = match bytes {
                Some(b) => dir.replace(name.as_ref(), &b),
                None => dir.remove(name.as_ref()),
            };
        }
    }
}

/// Before a first signature of the folder `dir` (shown as `shown`): the files it writes again
/// (`pages`) and an unsigned manifest found there, kept to be put back if the signature fails;
/// that manifest seals nothing, and is then removed (with a note), so that the signature writes
/// its own over `what` ("the folder's files").
pub(crate) fn keep_for_first_signature(
    dir: &Dir,
    shown: &Path,
    pages: &[&'static str],
    kind: crate::fsio::read::Kind,
    what: &str,
) -> Result<SavedPages> {
    let names: Vec<&'static str> = pages
        .iter()
        .copied()
        .chain([crate::sign::MANIFEST_FILE])
        .collect();
    let saved = SavedPages::of(dir, &names, kind)?;
    if dir
        .exists(crate::sign::MANIFEST_FILE.as_ref())
        .unwrap_or(false)
    {
        crate::errln!(
            "note: {}: {} has no signature; it is written again over {what}",
            crate::console::visible(&shown.display().to_string()),
            crate::sign::MANIFEST_FILE
        );
        dir.remove(crate::sign::MANIFEST_FILE.as_ref())
            .map_err(|e| dir_error(shown, e))?;
    }
    Ok(saved)
}

/// `r`, the pages `saved` (if any) first put back into `dir` where it is an error.
pub(crate) fn restore_on_error<T>(saved: Option<SavedPages>, dir: &Dir, r: Result<T>) -> Result<T> {
    if r.is_err() {
        if let Some(pages) = saved {
            pages.restore(dir);
        }
    }
    r
}

/// An error of creating or opening a folder: the user's mistake (a file, a link, a name that
/// names no folder) is invalid input, anything else a failed write.
pub(crate) fn dir_error(path: &Path, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::InvalidInput | K::NotADirectory | K::AlreadyExists => {
            Error::Input(InputError::Other(format!("{}: {}", path.display(), e)))
        }
        _ => Error::Write {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

/// Lock the folder `dir` for this command, or say that another nodecert holds it.
pub(crate) fn lock_dir(d: Dir) -> Result<LockedDir> {
    let path = d.path().to_path_buf();
    d.lock().map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Input(InputError::Other(format!(
            "{}: another nodecert is writing to this folder (it holds the folder's lock); \
             wait for it to end or choose another folder",
            path.display()
        ))),
        _ => Error::Write { path, source: e },
    })
}

/// Create (when missing) and lock a folder for reports, refusing a signed one, and for a report
/// of `kind` one that holds the other kind's evidence. Checked again under the lock: a run that
/// signed here meanwhile is not overwritten.
pub(crate) fn open_report_dir(out: &Path, kind: Option<sign::ReportKind>) -> Result<LockedDir> {
    let d = lock_dir(Dir::create_all(out).map_err(|e| dir_error(out, e))?)?;
    if d.exists(sign::MANIFEST_FILE.as_ref()).unwrap_or(true) {
        return Err(InputError::Other(format!(
            "{} holds a signed report ({}); refusing to write into it: choose another --out",
            out.display(),
            sign::MANIFEST_FILE
        ))
        .into());
    }
    // A node's report and a fleet's in one folder could be signed as neither (the manifest of
    // one does not cover the other's files).
    let Some(kind) = kind else { return Ok(d) };
    let other = match kind {
        sign::ReportKind::Node => sign::ReportKind::Fleet,
        sign::ReportKind::Fleet => sign::ReportKind::Node,
    };
    if d.exists(other.evidence_file().as_ref()).unwrap_or(true) {
        return Err(InputError::Other(format!(
            "{} holds a {} report ({}); refusing to write a {} report beside it: choose another --out",
            out.display(),
            other.key(),
            other.evidence_file(),
            kind.key()
        ))
        .into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence() -> Evidence {
        crate::runner::simulate("h200-vm-1", "h200-vm-1", &[], 1).unwrap()
    }

    #[test]
    fn what_appears_during_the_run_is_refused_when_the_exports_are_written() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let shared = t.path().join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        let ev = evidence();
        let junit = shared.join("junit.xml");
        let prom = shared.join("node.prom");
        let args = ExportArgs {
            junit: Some(junit.clone()),
            prometheus: Some(prom.clone()),
            force: false,
        };
        args.check(&out, None).unwrap();
        // During the run someone puts their notes where the metrics go.
        std::fs::write(&prom, "my notes").unwrap();
        let e = args.write(&ev, &out, None).unwrap_err().to_string();
        assert!(e.contains("is not an earlier --prometheus output"), "{e}");
        assert_eq!(std::fs::read_to_string(&prom).unwrap(), "my notes");
        // An earlier output of its own kind is replaced, as before the run.
        std::fs::write(&prom, "# HELP nodecert_old x\n").unwrap();
        let written = args.write(&ev, &out, None).unwrap();
        assert_eq!(written, [junit.clone(), prom.clone()]);
        assert!(std::fs::read_to_string(&prom)
            .unwrap()
            .starts_with("# HELP nodecert_"));
        // The folder is signed during the run: nothing more is written there.
        std::fs::write(shared.join(sign::MANIFEST_FILE), "signed").unwrap();
        std::fs::remove_file(&junit).unwrap();
        let e = args.write(&ev, &out, None).unwrap_err().to_string();
        assert!(e.contains("holds a signed report; add --force"), "{e}");
        assert!(!junit.exists());
        // --force still writes there.
        let forced = ExportArgs {
            force: true,
            ..args
        };
        forced.write(&ev, &out, None).unwrap();
        assert!(junit.is_file());
    }

    #[test]
    fn an_export_that_became_the_evidence_read_is_refused_at_write_time() {
        let t = tempfile::tempdir().unwrap();
        let read = t.path().join("old.json");
        let target = t.path().join("junit.xml");
        let args = ExportArgs {
            junit: Some(target.clone()),
            prometheus: None,
            force: true,
        };
        args.check(t.path(), Some(&read)).unwrap();
        // The target is made a hard link to the evidence being read.
        std::fs::write(&read, "{}").unwrap();
        std::fs::hard_link(&read, &target).unwrap();
        let e = args
            .write(&evidence(), &t.path().join("out"), Some(&read))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is the evidence being read"), "{e}");
        assert_eq!(std::fs::read_to_string(&read).unwrap(), "{}");
    }

    /// Just before `run` writes its pages: a page that appeared meanwhile is refused unless it
    /// is nodecert's (its templates' mark, or empty) or `--force` is given, and then only a
    /// regular file; a manifest that appeared is refused even with `--force`.
    /// Nothing there is touched.
    #[test]
    fn what_appeared_where_the_pages_go_is_refused_unless_nodecert_s() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path();
        let d = Dir::open(out).unwrap();
        let check = |force: bool| check_pages_unclaimed(&d, out, force).map_err(|e| e.to_string());
        check(false).unwrap();
        let md = out.join("report.md");
        for own in ["", "# nodecert certificate: PASS\n"] {
            std::fs::write(&md, own).unwrap();
            check(false).unwrap();
        }
        std::fs::write(&md, "my notes\n").unwrap();
        let e = check(false).unwrap_err();
        assert!(
            e.contains(
                "report.md is not a file nodecert wrote, and appeared while the run went on"
            ),
            "{e}"
        );
        assert!(e.contains("nodecert render "), "{e}");
        check(true).unwrap();
        assert_eq!(std::fs::read_to_string(&md).unwrap(), "my notes\n");
        std::fs::remove_file(&md).unwrap();
        // Not a regular file: refused even with --force, and left as it is.
        let html = out.join("report.html");
        crate::testutil::mkfifo(&html);
        for force in [false, true] {
            let e = check(force).unwrap_err();
            assert!(e.contains("report.html: "), "{e}");
        }
        std::fs::remove_file(&html).unwrap();
        std::os::unix::fs::symlink(out.join("elsewhere"), &html).unwrap();
        assert!(check(true).is_err());
        std::fs::remove_file(&html).unwrap();
        // A manifest nodecert did not write here; a stray signature is the signature's to
        // refuse (it would sign beside no manifest of its own).
        std::fs::write(out.join(sign::MANIFEST_FILE), "theirs").unwrap();
        let e = check(true).unwrap_err();
        assert!(
            e.contains("nodecert-manifest.txt is not a file this run wrote"),
            "{e}"
        );
        std::fs::remove_file(out.join(sign::MANIFEST_FILE)).unwrap();
        std::fs::write(out.join("nodecert-manifest.txt.sig"), "theirs").unwrap();
        check(false).unwrap();
    }
}
