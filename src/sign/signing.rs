//! Signing: writing the manifest and a signature or countersignature.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use ssh_key::{HashAlg, LineEnding};

use super::keys::{read_signing_key, sign_manifest};
use super::manifest::{check_file_name, evidence_simulated, existing_signatures, signature_name};
use super::verify::{inspect, LoadedTrust};
use super::*;
use crate::fsio::write::Dir;

/// What [`sign_dir`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct SignatureInfo {
    pub manifest: PathBuf,
    /// Whether this call wrote the manifest (false: it existed).
    pub manifest_written: bool,
    pub signature: PathBuf,
    /// True when another signature existed and this one was written beside it.
    pub countersignature: bool,
    pub fingerprint: String,
}

/// Metadata for [`write_manifest`].
#[derive(Debug, Clone)]
pub struct ManifestMeta {
    pub nodecert_version: String,
    /// `None`: read the top-level `simulated` boolean of `evidence.json`.
    /// `Some`: use it; it must agree with `evidence.json` when that has one.
    pub simulated: Option<bool>,
}

impl Default for ManifestMeta {
    fn default() -> Self {
        ManifestMeta {
            nodecert_version: env!("CARGO_PKG_VERSION").to_string(),
            simulated: None,
        }
    }
}

/// Write `dir/`[`MANIFEST_FILE`] listing the SHA-256 of `files` (names relative
/// to `dir`; `evidence.json`, or for a fleet's folder `fleet.json`, must be one of them). Replaces an existing
/// manifest only while no signature exists. Returns the manifest path.
pub fn write_manifest(
    dir: &Path,
    files: &[&str],
    meta: &ManifestMeta,
) -> Result<PathBuf, SignError> {
    write_manifest_in(&open_dir(dir)?, files, meta)
}

/// The folder `dir`, reached through no other user's symbolic link.
fn open_dir(dir: &Path) -> Result<Dir, SignError> {
    Dir::open_trusted(dir).map_err(io_err("open", dir))
}

/// [`write_manifest`] into a folder already open (and locked, for a command): the files are
/// read through its handle ([`Dir::read_root`]), and the manifest written through it, only
/// while its path still names it ([`Dir::check_in_place`]).
pub fn write_manifest_in(
    folder: &Dir,
    files: &[&str],
    meta: &ManifestMeta,
) -> Result<PathBuf, SignError> {
    let dir = folder.path();
    let root = read_root(folder)?;
    let at = Place::new(&root, dir);
    let manifest_path = dir.join(MANIFEST_FILE);
    let mut seen = BTreeSet::new();
    for name in files {
        check_file_name(name).map_err(|reason| SignError::FileName {
            name: name.to_string(),
            reason,
        })?;
        if !seen.insert(*name) {
            return Err(SignError::FileName {
                name: name.to_string(),
                reason: "listed twice".into(),
            });
        }
    }
    let kind =
        ReportKind::of_files(seen.iter().copied()).map_err(|reason| SignError::Manifest {
            path: manifest_path.clone(),
            reason: format!("{reason}: the folder's evidence file must be among the listed files"),
        })?;
    let primary = kind.evidence_file();
    if meta.nodecert_version.is_empty() || meta.nodecert_version.chars().any(|c| c.is_control()) {
        return Err(SignError::Manifest {
            path: manifest_path,
            reason: "nodecert version is empty or contains control characters".into(),
        });
    }
    if let Some(sig) = existing_signatures(at)?.first() {
        return Err(SignError::Manifest {
            path: manifest_path,
            reason: format!("already signed ({sig}); a signed manifest is never rewritten"),
        });
    }
    let evidence_path = dir.join(primary);
    let from_evidence = evidence_simulated(kind, at)?;
    let simulated = match (meta.simulated, from_evidence) {
        (Some(a), Some(b)) if a != b => {
            return Err(SignError::Evidence {
                path: evidence_path,
                reason: format!("says simulated: {b}, but the manifest was asked to say {a}"),
            })
        }
        (Some(a), _) => a,
        (None, Some(b)) => b,
        (None, None) => {
            return Err(SignError::Evidence {
                path: evidence_path,
                reason: "has no top-level boolean 'simulated' and none was given".into(),
            })
        }
    };
    let mut entries = Vec::new();
    let mut budget = kind.read_budget();
    for name in files {
        let p = dir.join(name);
        let h = sha256_in(&root, name, &mut budget).map_err(io_err("read", &p))?;
        entries.push((name.to_string(), h));
    }
    let evidence_sha256 = entries
        .iter()
        .find(|(n, _)| n == primary)
        .map(|(_, h)| h.clone())
        .unwrap_or_default();
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_string(),
        nodecert_version: meta.nodecert_version.clone(),
        kind,
        evidence_sha256,
        simulated,
        files: entries,
    };
    let text = manifest.render();
    debug_assert_eq!(Manifest::parse(&text).as_ref(), Ok(&manifest));
    folder
        .replace_in_place(MANIFEST_FILE.as_ref(), text.as_bytes())
        .map_err(io_err("write", &manifest_path))?;
    Ok(manifest_path)
}

/// Sign the report in `dir` with the unencrypted OpenSSH private key file
/// `key` (Ed25519, ECDSA P-256/P-384 or RSA).
///
/// Writes the manifest (over the [`ReportKind::default_files`] present: [`DEFAULT_FILES`] for a
/// node's folder, the fleet report's files for a fleet's) if it is missing, then
/// checks that every digest matches and every existing signature is valid, and
/// writes [`SIGNATURE_FILE`], or, if that exists, the countersignature
/// `nodecert-manifest.txt.N.sig` with the smallest free N >= 2. Never modifies
/// an existing manifest or signature. Signing again with a key that already
/// signed is [`SignError::AlreadySigned`].
pub fn sign_dir(dir: &Path, key: &Path) -> Result<SignatureInfo, SignError> {
    sign_dir_in(&open_dir(dir)?, key, None)
}

/// [`sign_dir`] for a folder already open (and locked, for a command): the manifest and the
/// signature are written through its handle, and only while its path still names it.
///
/// With `checked`, the SHA-256 of the evidence file as the caller read and judged it (that it
/// may be signed at all): a file that is not those bytes when the manifest is checked (changed
/// in between, by a writer that is not nodecert) is refused. What is signed is then what was
/// judged signable. Whatever the refusal or failure, a manifest this call wrote is removed
/// again: a folder is never left with a manifest and no signature.
pub fn sign_dir_in(
    folder: &Dir,
    key: &Path,
    checked: Option<&str>,
) -> Result<SignatureInfo, SignError> {
    let dir = folder.path();
    let root = read_root(folder)?;
    let at = Place::new(&root, dir);
    let private = read_signing_key(key)?;
    let fingerprint = private.fingerprint(HashAlg::Sha256).to_string();
    let manifest_path = dir.join(MANIFEST_FILE);
    let mut manifest_written = false;
    let here = |name: &str| folder.exists(name.as_ref()).map_err(io_err("read", dir));
    if !here(MANIFEST_FILE)? {
        if let Some(sig) = existing_signatures(at)?.first() {
            return Err(SignError::Manifest {
                path: manifest_path,
                reason: format!("missing, but {sig} exists"),
            });
        }
        let kind = ReportKind::of_presence(here(EVIDENCE_FILE)?, here(crate::fleet::FLEET_FILE)?);
        let mut present: Vec<&str> = Vec::new();
        for f in kind.default_files().iter().copied() {
            if f == kind.evidence_file() || here(f)? {
                present.push(f);
            }
        }
        write_manifest_in(folder, &present, &ManifestMeta::default())?;
        manifest_written = true;
    }
    let signed = seal(folder, key, &private, &fingerprint, checked).map(|(signature, index)| {
        SignatureInfo {
            manifest: manifest_path.clone(),
            manifest_written,
            signature,
            countersignature: index > 1,
            fingerprint: fingerprint.clone(),
        }
    });
    if !manifest_written {
        return signed;
    }
    // Nothing was signed: the manifest this call wrote goes again, so that the folder is not
    // left looking signed (a later run or sign would refuse it).
    undo_manifest(signed, &manifest_path, || {
        folder.remove(MANIFEST_FILE.as_ref())
    })
}

/// A failed signature whose manifest was written by the same call: the manifest is removed
/// (`remove`). The signature's own error is the one told; if the manifest cannot be removed
/// either, the error says so too (a manifest without a signature is left in the folder, and a
/// later sign or run refuses the folder until it is removed), as a manifest error.
fn undo_manifest<T>(
    signed: Result<T, SignError>,
    manifest: &Path,
    remove: impl FnOnce() -> std::io::Result<()>,
) -> Result<T, SignError> {
    let Err(e) = signed else { return signed };
    match remove() {
        Ok(()) => Err(e),
        Err(r) if r.kind() == std::io::ErrorKind::NotFound => Err(e),
        Err(r) => Err(SignError::Manifest {
            path: manifest.to_path_buf(),
            reason: format!(
                "written for a signature that failed ({e}), and it could not be removed ({}): \
                 remove it before signing again",
                crate::error::lower(&r)
            ),
        }),
    }
}

/// Check the folder against its manifest (and `checked`, the evidence digest the caller
/// judged), sign the manifest with `private` and write the signature: its path and index.
fn seal(
    folder: &Dir,
    key: &Path,
    private: &ssh_key::PrivateKey,
    fingerprint: &str,
    checked: Option<&str>,
) -> Result<(PathBuf, u32), SignError> {
    let dir = folder.path();
    let root = read_root(folder)?;
    let manifest_path = dir.join(MANIFEST_FILE);
    let (report, manifest) = inspect(Place::new(&root, dir), &LoadedTrust::None)?;
    if !report.problems.is_empty() {
        return Err(SignError::NotSignable {
            dir: dir.to_path_buf(),
            problems: report.problems,
        });
    }
    let manifest = manifest.ok_or_else(|| SignError::Manifest {
        path: manifest_path.clone(),
        reason: "missing".into(),
    })?;
    if let Some(want) = checked {
        let parsed = std::str::from_utf8(&manifest)
            .map_err(|e| e.to_string())
            .and_then(Manifest::parse)
            .map_err(|reason| SignError::Manifest {
                path: manifest_path.clone(),
                reason,
            })?;
        if parsed.evidence_sha256 != want {
            return Err(SignError::Evidence {
                path: dir.join(parsed.kind.evidence_file()),
                reason: format!(
                    "changed while it was being signed (SHA-256 {} when it was checked, {} \
                     now): nothing was signed",
                    short(want),
                    short(&parsed.evidence_sha256)
                ),
            });
        }
    }
    if let Some(s) = report
        .signatures
        .iter()
        .find(|s| s.fingerprint.as_deref() == Some(fingerprint))
    {
        return Err(SignError::AlreadySigned {
            path: dir.join(&s.file),
            fingerprint: fingerprint.to_string(),
        });
    }
    let sig = sign_manifest(private, &manifest).map_err(|e| SignError::Signing {
        path: key.to_path_buf(),
        reason: lowercase(&e),
    })?;
    private
        .public_key()
        .verify(NAMESPACE, &manifest, &sig)
        .map_err(|e| SignError::Signing {
            path: key.to_path_buf(),
            reason: format!("self-check failed: {}", lowercase(&e)),
        })?;
    let pem = sig.to_pem(LineEnding::LF).map_err(|e| SignError::Signing {
        path: key.to_path_buf(),
        reason: lowercase(&e),
    })?;
    let mut index = 1;
    loop {
        let path = dir.join(signature_name(index));
        let name = path.file_name().unwrap_or_default();
        let written = folder.create_new_in_place(name, pem.as_bytes(), 0o644);
        match map_new(&path, written) {
            Ok(()) => return Ok((path, index)),
            Err(SignError::Exists(_)) if index < 10_000 => index += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The first 12 hex digits of a digest, as messages show it.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    fn folder(evidence: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(EVIDENCE_FILE), evidence).unwrap();
        std::fs::write(d.path().join("report.md"), "# PASS\n").unwrap();
        d
    }

    fn digest(text: &str) -> String {
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    }

    /// A failed signature's manifest is removed and the signature's error told; a manifest
    /// that cannot be removed is told as well (it is left behind), one already gone is not;
    /// a signature made is never undone.
    #[test]
    fn a_manifest_that_cannot_be_removed_after_a_failed_signature_is_told() {
        let path = Path::new("/r/nodecert-manifest.txt");
        let failed = || -> Result<(), SignError> {
            Err(SignError::Signing {
                path: "/k".into(),
                reason: "boom".into(),
            })
        };
        let mut removed = false;
        let e = undo_manifest(failed(), path, || {
            removed = true;
            Ok(())
        })
        .unwrap_err();
        assert!(removed);
        assert!(matches!(e, SignError::Signing { .. }), "{e}");

        let gone = || Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let e = undo_manifest(failed(), path, gone).unwrap_err();
        assert!(matches!(e, SignError::Signing { .. }), "{e}");

        let stuck = || Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        let e = undo_manifest(failed(), path, stuck).unwrap_err();
        let SignError::Manifest { path: p, reason } = &e else {
            panic!("{e}")
        };
        assert_eq!(p, path);
        assert!(reason.contains("boom"), "{reason}");
        assert!(reason.contains("could not be removed"), "{reason}");
        assert!(reason.contains("permission denied"), "{reason}");

        let mut called = false;
        let ok = undo_manifest(Ok::<u8, SignError>(7), path, || {
            called = true;
            Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
        });
        assert_eq!(ok.unwrap(), 7);
        assert!(!called, "a signature made leaves its manifest");
    }

    /// What the caller judged signable is what is signed: an evidence file that is not the
    /// bytes judged is refused, the manifest this call wrote goes again, and nothing is
    /// signed; one that is, is signed; a countersignature is held to the same.
    #[test]
    fn evidence_changed_after_it_was_judged_is_not_signed() {
        let keys = tempfile::tempdir().unwrap();
        let key = keys.path().join("k");
        keygen(&key, "ops@test").unwrap();
        let judged = "{\"simulated\": false, \"verdict\": \"nothing_judged\"}\n";
        let swapped = "{\"simulated\": false, \"verdict\": \"pass\"}\n";
        let d = folder(swapped);
        let e = sign_dir_in(&open_dir(d.path()).unwrap(), &key, Some(&digest(judged))).unwrap_err();
        assert!(matches!(e, SignError::Evidence { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "evidence.json: changed while it was being signed (SHA-256 {} when it was \
                 checked, {} now): nothing was signed",
                &digest(judged)[..12],
                &digest(swapped)[..12]
            )),
            "{text}"
        );
        assert!(!d.path().join(MANIFEST_FILE).exists());
        assert!(!d.path().join(SIGNATURE_FILE).exists());

        // The bytes judged: signed.
        let d = folder(judged);
        let info = sign_dir_in(&open_dir(d.path()).unwrap(), &key, Some(&digest(judged))).unwrap();
        assert!(info.manifest_written && !info.countersignature);
        // The manifest it wrote lists the node's files that are there, the evidence first.
        let text = std::fs::read_to_string(d.path().join(MANIFEST_FILE)).unwrap();
        let listed: Vec<String> = Manifest::parse(&text)
            .unwrap()
            .files
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(listed, [EVIDENCE_FILE, "report.md"]);

        // A countersignature by another key, of a file that is not what it judged: refused,
        // and the manifest the first signature sealed is kept.
        let other = keys.path().join("o");
        keygen(&other, "audit@test").unwrap();
        let manifest = std::fs::read(d.path().join(MANIFEST_FILE)).unwrap();
        let e = sign_dir_in(&open_dir(d.path()).unwrap(), &other, Some(&digest("x"))).unwrap_err();
        assert!(
            e.to_string().contains("changed while it was being signed"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(d.path().join(MANIFEST_FILE)).unwrap(),
            manifest
        );
        let again = sign_dir_in(&open_dir(d.path()).unwrap(), &other, Some(&digest(judged)));
        assert!(again.unwrap().countersignature);
    }

    /// The signatures of a folder held, listed through its handle: the first, then the
    /// countersignatures by number; other files are none of them.
    #[test]
    fn the_signatures_of_a_folder_held_are_listed_in_order() {
        let d = folder("{}");
        let held = open_dir(d.path()).unwrap();
        assert!(super::super::signatures_in_folder(&held)
            .unwrap()
            .is_empty());
        for name in [
            "nodecert-manifest.txt.10.sig",
            SIGNATURE_FILE,
            "nodecert-manifest.txt.2.sig",
            "nodecert-manifest.txt.sig.bak",
        ] {
            std::fs::write(d.path().join(name), "x").unwrap();
        }
        assert_eq!(
            super::super::signatures_in_folder(&held).unwrap(),
            [
                SIGNATURE_FILE,
                "nodecert-manifest.txt.2.sig",
                "nodecert-manifest.txt.10.sig"
            ]
        );
    }

    /// A signer reads the folder it holds, whatever its path names meanwhile: someone who may
    /// rename entries of its parent and swaps in a folder of their own (for as long as the
    /// files are read) does not have their evidence's digest sealed. Messages still name the
    /// folder by the path the signer gave.
    #[test]
    fn the_folder_held_is_read_whatever_its_path_names() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("report");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join(EVIDENCE_FILE), "{\"simulated\": false}\n").unwrap();
        let held = open_dir(&p).unwrap();
        write_manifest_in(&held, &[EVIDENCE_FILE], &ManifestMeta::default()).unwrap();
        let manifest = std::fs::read(p.join(MANIFEST_FILE)).unwrap();
        std::fs::rename(&p, t.path().join("moved")).unwrap();
        std::fs::create_dir(&p).unwrap();
        std::fs::write(
            p.join(EVIDENCE_FILE),
            "{\"simulated\": false, \"forged\": 1}\n",
        )
        .unwrap();
        std::fs::write(p.join(MANIFEST_FILE), &manifest).unwrap();
        let root = held.read_root().unwrap();
        let (r, m) = inspect(Place::new(&root, held.path()), &LoadedTrust::None).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(m.as_deref(), Some(&manifest[..]));
        assert_eq!(r.dir, p);
        // By its path, the forged folder is what would have been read.
        let (r, _) = inspect(Place::at(&p), &LoadedTrust::None).unwrap();
        assert!(
            r.problems.iter().any(|x| x.contains("sha-256 mismatch")),
            "{:?}",
            r.problems
        );
        // An unreadable file is named by the path given, not by the handle's.
        std::fs::remove_file(t.path().join("moved").join(EVIDENCE_FILE)).unwrap();
        let e = evidence_simulated(ReportKind::Node, Place::new(&root, &p)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&p.join(EVIDENCE_FILE).display().to_string()),
            "{text}"
        );
        assert!(!text.contains("/proc/"), "{text}");
    }

    /// A signature refused after the manifest was written (here: a problem the check of the
    /// folder finds, a stray signature-like file) leaves no manifest: the folder is not left
    /// looking signed. A file whose name is not UTF-8 is no such problem: it is not covered,
    /// and said.
    #[test]
    fn a_refused_signature_leaves_no_manifest() {
        use std::os::unix::ffi::OsStrExt;
        let keys = tempfile::tempdir().unwrap();
        let key = keys.path().join("k");
        keygen(&key, "ops@test").unwrap();
        let d = folder("{\"simulated\": false}\n");
        std::fs::write(d.path().join("nodecert-manifest.txt.sig.bak"), "x").unwrap();
        let e = sign_dir_in(&open_dir(d.path()).unwrap(), &key, None).unwrap_err();
        assert!(matches!(e, SignError::NotSignable { .. }), "{e}");
        assert!(
            e.to_string().contains("unexpected signature-like file"),
            "{e}"
        );
        assert!(!d.path().join(MANIFEST_FILE).exists());
        assert!(!d.path().join(SIGNATURE_FILE).exists());
        let d = folder("{\"simulated\": false}\n");
        let odd = std::ffi::OsStr::from_bytes(b"notes-\xff.txt");
        std::fs::write(d.path().join(odd), "x").unwrap();
        sign_dir_in(&open_dir(d.path()).unwrap(), &key, None).unwrap();
        let pub_key = keys.path().join("k.pub");
        let r =
            super::super::verify_dir(d.path(), &super::super::Trust::PublicKey(pub_key)).unwrap();
        assert!(r.ok(), "{r}");
        assert!(
            r.notes.iter().any(
                |n| n.contains("not covered by the manifest") && n.contains("(name not utf-8)")
            ),
            "{r}"
        );
    }
}
