//! The manifest: its text format, the names of signature files, file digests.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read};
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::*;

/// A parsed manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub format: String,
    pub nodecert_version: String,
    /// What the folder reports on: a node (evidence.json) or a fleet (fleet.json).
    pub kind: ReportKind,
    /// SHA-256 of the kind's evidence file.
    pub evidence_sha256: String,
    pub simulated: bool,
    /// `(file name, sha-256 hex)` in manifest order.
    pub files: Vec<(String, String)>,
}

pub(crate) fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(super) fn is_signature_name(name: &str) -> bool {
    if name == SIGNATURE_FILE {
        return true;
    }
    signature_index(name).is_some()
}

/// `nodecert-manifest.txt.<n>.sig` with n >= 2, no leading zero.
pub(super) fn signature_index(name: &str) -> Option<u32> {
    let mid = name
        .strip_prefix(MANIFEST_FILE)?
        .strip_prefix('.')?
        .strip_suffix(".sig")?;
    if mid.is_empty() || mid.starts_with('0') || !mid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    mid.parse().ok().filter(|n| *n >= 2)
}

pub(super) fn signature_name(index: u32) -> String {
    if index <= 1 {
        SIGNATURE_FILE.to_string()
    } else {
        format!("{MANIFEST_FILE}.{index}.sig")
    }
}

pub(super) fn check_file_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty".into());
    }
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return Err("contains a control character or backslash".into());
    }
    // A bidi override or an invisible character would make the name read as another one.
    if name.chars().any(crate::console::is_hidden) {
        return Err("contains a bidi or invisible character".into());
    }
    if name.trim() != name {
        return Err("starts or ends with white space".into());
    }
    if name.starts_with('/') {
        return Err("absolute path".into());
    }
    if name
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err("empty, '.' or '..' path component".into());
    }
    let first = name.split('/').next().unwrap_or(name);
    if first.starts_with(MANIFEST_FILE) || name.ends_with(".sig") {
        return Err("the manifest and signatures cannot be listed".into());
    }
    Ok(())
}

fn parse_meta_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("# ")?;
    let (key, value) = rest.split_once(": ")?;
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
    {
        return None;
    }
    Some((key, value))
}

impl Manifest {
    /// Parse manifest text strictly (see the module documentation).
    pub fn parse(text: &str) -> Result<Manifest, String> {
        if text.is_empty() {
            return Err("empty manifest".into());
        }
        if text.contains('\r') {
            return Err("contains a carriage return (must use \\n line endings)".into());
        }
        let body = text
            .strip_suffix('\n')
            .ok_or("does not end with a line break")?;
        let mut lines = body.split('\n');
        let first = lines.next().unwrap_or("");
        match parse_meta_line(first) {
            Some(("format", f)) if f == MANIFEST_FORMAT => {}
            Some(("format", f)) => {
                return Err(format!(
                    "unsupported manifest format {f:?} (expected {MANIFEST_FORMAT})"
                ))
            }
            _ => return Err(format!("first line is not '# format: {MANIFEST_FORMAT}'")),
        }
        let mut version = None;
        let mut kind = None;
        let mut evidence = None;
        let mut simulated = None;
        let mut warning = false;
        let mut files: Vec<(String, String)> = Vec::new();
        let mut names = BTreeSet::new();
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            if line.starts_with('#') {
                if line == SIMULATED_WARNING {
                    warning = true;
                }
                let Some((key, value)) = parse_meta_line(line) else {
                    continue;
                };
                let slot = match key {
                    "format" => return Err(format!("line {n}: duplicate 'format'")),
                    "nodecert-version" => &mut version,
                    "kind" => &mut kind,
                    "evidence-sha256" => &mut evidence,
                    "simulated" => &mut simulated,
                    _ => continue,
                };
                if slot.is_some() {
                    return Err(format!("line {n}: duplicate '{key}'"));
                }
                *slot = Some(value.to_string());
                continue;
            }
            if line.is_empty() {
                return Err(format!("line {n}: blank line"));
            }
            let (hash, name) = match (line.get(..64), line.get(64..66), line.get(66..)) {
                (Some(h), Some("  "), Some(name)) if is_hex64(h) => (h, name),
                _ => {
                    return Err(format!(
                        "line {n}: neither a '#' comment nor a '<sha-256>  <file>' line"
                    ))
                }
            };
            check_file_name(name).map_err(|e| format!("line {n}: file name {name:?}: {e}"))?;
            if !names.insert(name.to_string()) {
                return Err(format!("line {n}: {name} listed twice"));
            }
            files.push((name.to_string(), hash.to_string()));
        }
        let nodecert_version = version.ok_or("missing '# nodecert-version: ' line")?;
        // An unknown kind is refused: its evidence file, and so what was signed, is unknown.
        let kind = match kind.as_deref() {
            None | Some("node") => ReportKind::Node,
            Some("fleet") => ReportKind::Fleet,
            Some(other) => {
                return Err(format!(
                    "kind is {other:?}: this nodecert knows \"node\" and \"fleet\""
                ))
            }
        };
        let evidence_sha256 = evidence.ok_or("missing '# evidence-sha256: ' line")?;
        if !is_hex64(&evidence_sha256) {
            return Err("evidence-sha256 is not 64 lowercase hex digits".into());
        }
        let simulated = match simulated.as_deref() {
            Some("true") => true,
            Some("false") => false,
            Some(other) => return Err(format!("simulated is {other:?}, not true or false")),
            None => return Err("missing '# simulated: ' line".into()),
        };
        if simulated && !warning {
            return Err("simulated results without the simulated-results warning line".into());
        }
        if !simulated && warning {
            return Err("simulated-results warning line in a manifest of real results".into());
        }
        let primary = kind.evidence_file();
        match files.iter().find(|(n, _)| n == primary) {
            None => return Err(format!("{primary} is not listed")),
            Some((_, h)) if *h != evidence_sha256 => {
                return Err(format!(
                    "evidence-sha256 {} differs from the digest listed for {primary} {}",
                    short(&evidence_sha256),
                    short(h)
                ))
            }
            Some(_) => {}
        }
        // The other kind's evidence file beside it would make the folder two reports in one.
        ReportKind::of_files(files.iter().map(|(n, _)| n.as_str()))?;
        Ok(Manifest {
            format: MANIFEST_FORMAT.to_string(),
            nodecert_version,
            kind,
            evidence_sha256,
            simulated,
            files,
        })
    }

    /// Render the manifest text (the inverse of [`Manifest::parse`]).
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!("# format: {MANIFEST_FORMAT}\n"));
        s.push_str(&format!("# nodecert-version: {}\n", self.nodecert_version));
        // A node's manifest reads as it did before kinds existed.
        if self.kind != ReportKind::Node {
            s.push_str(&format!("# kind: {}\n", self.kind.key()));
        }
        s.push_str(&format!("# evidence-sha256: {}\n", self.evidence_sha256));
        s.push_str(&format!("# simulated: {}\n", self.simulated));
        if self.simulated {
            s.push_str(SIMULATED_WARNING);
            s.push('\n');
        }
        s.push_str("#\n");
        s.push_str(
            "# SHA-256 of each file of this nodecert report, one '<sha-256>  <file>' line each.\n",
        );
        s.push_str(&format!(
            "# Signed with SSH keys ({SIGNATURE_FILE}, countersignatures {MANIFEST_FILE}.N.sig; namespace {NAMESPACE}).\n"
        ));
        s.push_str(&format!(
            "# Check a signature: ssh-keygen -Y verify -f allowed_signers -I IDENTITY -n {NAMESPACE} -s {SIGNATURE_FILE} < {MANIFEST_FILE}\n"
        ));
        s.push_str(&format!(
            "# Check the files, in this directory: sha256sum -c {MANIFEST_FILE}\n"
        ));
        for (name, hash) in &self.files {
            s.push_str(&format!("{hash}  {name}\n"));
        }
        s
    }
}

pub(super) fn short(hex: &str) -> String {
    format!("{}…", &hex[..hex.len().min(12)])
}

/// SHA-256 of the regular file `rel` of the folder `dir`, following no symbolic link below it,
/// reading no more than `budget` bytes, which it lowers by what it read: the files a manifest
/// lists are read within what a report folder holds ([`super::ReportKind::read_budget`]), so
/// that a listed file of terabytes (a sparse one costs nothing to make) cannot hold `verify`
/// or `fleet report` for hours.
pub fn sha256_in(dir: &Path, rel: &str, budget: &mut u64) -> io::Result<String> {
    sha256_of(crate::fsio::read::open_in(dir, rel)?, budget)
}

fn sha256_of(f: fs::File, budget: &mut u64) -> io::Result<String> {
    let too_big = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "larger than the files of a report folder may be together; not read",
        )
    };
    if f.metadata()?.len() > *budget {
        return Err(too_big());
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    // One byte past the budget tells a file that grew while it was read.
    let mut r = f.take(*budget + 1);
    let mut read = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > *budget {
            return Err(too_big());
        }
        h.update(&buf[..n]);
    }
    *budget -= read;
    Ok(hex::encode(h.finalize()))
}

/// Whether a folder's evidence file is simulated: for a node, from all the records of its
/// evidence.json ([`crate::evidence::simulated_status`]); for a fleet, from fleet.json, whose
/// flag must agree with its nodes' ([`crate::fleet::simulated_status`]).
/// The file is read in `dir` without following a link.
pub(super) fn evidence_simulated(kind: ReportKind, dir: Place) -> Result<Option<bool>, SignError> {
    let name = kind.evidence_file();
    let path = &dir.shown(name);
    let read_as = match kind {
        ReportKind::Fleet => crate::fsio::read::Kind::Fleet,
        ReportKind::Node => crate::fsio::read::Kind::Evidence,
    };
    let bytes = crate::fsio::read::open_in(dir.read, name)
        .and_then(|f| crate::fsio::read::read_limited(f, read_as.limit(), read_as.name()))
        .map_err(io_err("read", path))?;
    if kind == ReportKind::Fleet {
        return crate::fleet::simulated_status_of(&bytes)
            .map(Some)
            .map_err(|reason| SignError::Evidence {
                path: path.to_path_buf(),
                reason,
            });
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| SignError::Evidence {
        path: path.to_path_buf(),
        reason: format!("not valid json: {e}"),
    })?;
    // Every record that says whether the figures are simulated must agree: one edited field
    // does not make simulated figures a certification of hardware.
    crate::evidence::simulated_status(&v).map_err(|reason| SignError::Evidence {
        path: path.to_path_buf(),
        reason,
    })
}

pub(super) fn existing_signatures(dir: Place) -> Result<Vec<String>, SignError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir.read).map_err(io_err("list", dir.shown))? {
        let entry = entry.map_err(io_err("list", dir.shown))?;
        if let Some(name) = entry.file_name().to_str() {
            if is_signature_name(name) {
                out.push(name.to_string());
            }
        }
    }
    out.sort_by_key(|n| signature_index(n).unwrap_or(1));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files a manifest lists are read within one budget: a file larger than what is left
    /// (a sparse file of terabytes costs nothing to make) is refused before it is read, and
    /// what was read is taken from the budget.
    #[test]
    fn listed_files_are_read_within_the_folders_budget() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), b"abc").unwrap();
        let huge = std::fs::File::create(d.path().join("huge")).unwrap();
        huge.set_len(1 << 40).unwrap();
        let mut budget = 10;
        assert_eq!(
            sha256_in(d.path(), "a", &mut budget).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(budget, 7);
        let e = sha256_in(d.path(), "huge", &mut budget).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("not read"), "{e}");
        assert_eq!(budget, 7, "nothing was read");
        // Exactly what is left is read; one byte more is not.
        let mut three = 3;
        assert!(sha256_in(d.path(), "a", &mut three).is_ok());
        assert_eq!(three, 0);
        let mut two = 2;
        assert!(sha256_in(d.path(), "a", &mut two).is_err());
        // A file that says it is smaller than what it gives (it grew while it was read; /proc
        // files say 0 bytes) is cut at the budget too, not read to its end.
        let mut ten = 10;
        let e = sha256_in(Path::new("/proc/self"), "status", &mut ten).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert_eq!(
            (
                super::super::ReportKind::Node.read_budget() >> 20,
                super::super::ReportKind::Fleet.read_budget() >> 20
            ),
            (512, 8192)
        );
    }

    #[test]
    fn signature_names() {
        assert_eq!(signature_index("nodecert-manifest.txt.2.sig"), Some(2));
        assert_eq!(signature_index("nodecert-manifest.txt.02.sig"), None);
        assert_eq!(signature_index("nodecert-manifest.txt.1.sig"), None);
        assert_eq!(signature_index("nodecert-manifest.txt.sig"), None);
        assert!(is_signature_name("nodecert-manifest.txt.sig"));
        assert!(!is_signature_name("nodecert-manifest.txt.x.sig"));
        assert_eq!(signature_name(1), SIGNATURE_FILE);
        assert_eq!(signature_name(3), "nodecert-manifest.txt.3.sig");
    }

    #[test]
    fn file_names() {
        assert!(check_file_name("report.html").is_ok());
        assert!(check_file_name("raw/nccl.log").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "a\nb",
            "a\\b",
            " a",
            "x.sig",
            MANIFEST_FILE,
        ] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_file_name_with_a_bidi_or_invisible_character_is_refused() {
        assert!(check_file_name("report\u{e9}.html").is_ok());
        for bad in [
            "report\u{202e}lmth.exe",
            "evidence\u{2066}.json",
            "report\u{200b}.md",
            "raw/\u{feff}nccl.log",
            "a\u{61c}b",
            "a\u{2060}b",
        ] {
            assert_eq!(
                check_file_name(bad),
                Err("contains a bidi or invisible character".into()),
                "{bad:?}"
            );
        }
        // Nor can a manifest list one.
        let mut text = sample(false).render();
        text.push_str(&format!("{}  report\u{202e}.md\n", "cd".repeat(32)));
        let e = Manifest::parse(&text).unwrap_err();
        assert!(e.contains("bidi or invisible"), "{e}");
    }

    fn sample(simulated: bool) -> Manifest {
        let h = "ab".repeat(32);
        Manifest {
            format: MANIFEST_FORMAT.into(),
            nodecert_version: "0.1.0".into(),
            kind: ReportKind::Node,
            evidence_sha256: h.clone(),
            simulated,
            files: vec![
                (EVIDENCE_FILE.into(), h),
                ("report.md".into(), "cd".repeat(32)),
            ],
        }
    }

    /// The evidence file is read as its kind: a node's evidence whose records disagree on
    /// whether it is simulated is refused, and so is a fleet whose flag disagrees with its
    /// nodes'; each as the other kind would pass.
    #[test]
    fn the_evidence_file_is_read_as_its_kind() {
        let d = tempfile::tempdir().unwrap();
        let at = Place::at(d.path());
        let node = |text: &str| {
            std::fs::write(d.path().join(EVIDENCE_FILE), text).unwrap();
            evidence_simulated(ReportKind::Node, at)
        };
        assert_eq!(
            node("{\"simulated\": true, \"backend\": {\"simulated\": true}}").unwrap(),
            Some(true)
        );
        let e = node("{\"simulated\": false, \"backend\": {\"simulated\": true}}").unwrap_err();
        assert!(matches!(e, SignError::Evidence { .. }), "{e}");
        let fleet = |text: &str| {
            std::fs::write(d.path().join("fleet.json"), text).unwrap();
            evidence_simulated(ReportKind::Fleet, at)
        };
        assert_eq!(
            fleet("{\"simulated\": true, \"nodes\": [{\"name\": \"n1\", \"simulated\": true}]}")
                .unwrap(),
            Some(true)
        );
        let e =
            fleet("{\"simulated\": false, \"nodes\": [{\"name\": \"n1\", \"simulated\": true}]}")
                .unwrap_err();
        assert!(
            e.to_string().contains("its node \"n1\" is simulated"),
            "{e}"
        );
    }

    #[test]
    fn a_folder_is_a_fleets_only_when_it_holds_fleet_json_and_no_evidence_json() {
        let d = tempfile::tempdir().unwrap();
        let kind = || ReportKind::of_folder(d.path());
        assert_eq!(
            kind(),
            ReportKind::Node,
            "neither: told evidence.json is missing"
        );
        std::fs::write(d.path().join("fleet.json"), "{}").unwrap();
        assert_eq!(kind(), ReportKind::Fleet);
        std::fs::write(d.path().join(EVIDENCE_FILE), "{}").unwrap();
        assert_eq!(kind(), ReportKind::Node, "both: a node's");
        // A dangling link named evidence.json is there, as the signature finds it.
        std::fs::remove_file(d.path().join(EVIDENCE_FILE)).unwrap();
        std::os::unix::fs::symlink("gone", d.path().join(EVIDENCE_FILE)).unwrap();
        assert_eq!(kind(), ReportKind::Node, "a link there: a node's");
        std::fs::remove_file(d.path().join("fleet.json")).unwrap();
        assert_eq!(kind(), ReportKind::Node);
        assert_eq!(ReportKind::Fleet.evidence_file(), "fleet.json");
        assert_eq!(ReportKind::Fleet.default_files().len(), 5);
        assert_eq!(ReportKind::Node.default_files(), DEFAULT_FILES);
    }

    #[test]
    fn a_fleet_manifest_names_its_kind_and_its_evidence_is_fleet_json() {
        let h = "ab".repeat(32);
        let m = Manifest {
            kind: ReportKind::Fleet,
            files: vec![
                ("fleet.json".into(), h.clone()),
                ("fleet.md".into(), "cd".repeat(32)),
            ],
            ..sample(false)
        };
        let text = m.render();
        assert!(text.contains("\n# kind: fleet\n"), "{text}");
        assert_eq!(Manifest::parse(&text), Ok(m));
        // A node's manifest is written as it always was: no kind line.
        assert!(!sample(false).render().contains("# kind:"));
        let node = text.replace("# kind: fleet\n", "# kind: node\n");
        assert!(Manifest::parse(&node)
            .unwrap_err()
            .contains("evidence.json is not listed"));
        let other = text.replace("# kind: fleet\n", "# kind: rack\n");
        assert!(Manifest::parse(&other).unwrap_err().contains("\"rack\""));
        let twice = text.replace("# kind: fleet\n", "# kind: fleet\n# kind: fleet\n");
        assert!(Manifest::parse(&twice)
            .unwrap_err()
            .contains("duplicate 'kind'"));
        // One folder is one report: a fleet's manifest listing a node's evidence is refused.
        let both = format!("{text}{h}  evidence.json\n");
        assert!(Manifest::parse(&both).unwrap_err().contains("both"));
        assert_eq!(
            ReportKind::of_files(["report.md"]).unwrap_err(),
            "evidence.json (or, for a fleet, fleet.json) is not listed"
        );
    }

    #[test]
    fn manifest_round_trip_and_strictness() {
        for sim in [true, false] {
            let m = sample(sim);
            let text = m.render();
            assert_eq!(Manifest::parse(&text), Ok(m));
            assert_eq!(text.contains(SIMULATED_WARNING), sim);
        }
        let text = sample(true).render();
        // Dropping the warning line is rejected.
        let no_warning = text.replace(&format!("{SIMULATED_WARNING}\n"), "");
        assert!(Manifest::parse(&no_warning)
            .unwrap_err()
            .contains("warning"));
        // Evidence digest must agree.
        let bad = text.replacen(&"ab".repeat(32), &"ef".repeat(32), 1);
        assert!(Manifest::parse(&bad).is_err());
        // Other bad shapes.
        assert!(Manifest::parse(&text.replace('\n', "\r\n")).is_err());
        assert!(Manifest::parse(text.trim_end()).is_err());
        assert!(Manifest::parse(&format!("{text}\n")).is_err());
        assert!(Manifest::parse(&format!("{text}garbage\n")).is_err());
        assert!(
            Manifest::parse(&text.replace("format: nodecert-manifest-1", "format: x")).is_err()
        );
        assert!(Manifest::parse(&format!("{text}# simulated: false\n")).is_err());
        assert!(Manifest::parse(&format!("{text}{}  report.md\n", "cd".repeat(32))).is_err());
    }
}
