//! Verification: the report of a folder's files and signatures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, PublicKey, SshSig};

use super::allowed_signers::{match_pattern_list, parse_allowed_signers, AllowedSigner};
use super::armor::{is_canonical_armor, normalize_armor, sk_flags, SK_USER_PRESENT};
use super::keys::{is_security_key, read_any_public_key, rsa_bits, MAX_RSA_BITS};
use super::manifest::{
    evidence_simulated, is_signature_name, short, signature_index, signature_name,
};
use super::*;

/// Missing signatures named one by one; past this many, the rest are counted.
const MISSING_SHOWN: usize = 3;

const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;
const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

/// Who is trusted to have signed.
#[derive(Debug, Clone)]
pub enum Trust {
    /// An OpenSSH allowed_signers file (see ssh-keygen(1), ALLOWED SIGNERS).
    AllowedSigners(PathBuf),
    /// A single public key (`.pub` file).
    PublicKey(PathBuf),
    /// Check signatures against their embedded keys only; never verifies.
    Untrusted,
}

/// State of one listed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FileStatus {
    Ok,
    Mismatch { actual: String },
    Missing,
    Unreadable { reason: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct FileCheck {
    pub name: String,
    /// Digest the manifest lists.
    pub expected: String,
    #[serde(flatten)]
    pub status: FileStatus,
}

/// State of one signature file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SigStatus {
    /// Valid, by a trusted key.
    Trusted,
    /// Cryptographically valid for its embedded key, but that key is not trusted.
    Untrusted { reason: String },
    /// Not a valid nodecert signature over this manifest.
    Invalid { reason: String },
    /// A kind of signature nodecert cannot check (another tool may): never verifies.
    Unsupported { reason: String },
    /// Valid, but by a key that already made the signature `of` (a copy, or the same key
    /// signing twice): not a second party, and it fails verification.
    Duplicate { of: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct SignatureCheck {
    pub file: String,
    /// Fingerprint of the embedded key, when the signature parses.
    pub fingerprint: Option<String>,
    /// Principals of the matching allowed_signers line.
    pub principal: Option<String>,
    #[serde(flatten)]
    pub status: SigStatus,
}

/// Everything [`verify_dir`] found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// As text (`verify --json`): a name that is not UTF-8 is shown, not refused.
    #[serde(serialize_with = "path_text")]
    pub dir: PathBuf,
    /// What the signatures were checked against.
    pub trust: String,
    pub manifest: Option<Manifest>,
    /// What the manifest says (None when it does not parse).
    pub simulated: Option<bool>,
    pub files: Vec<FileCheck>,
    pub signatures: Vec<SignatureCheck>,
    /// Every failure, lowercase, naming what failed. Empty iff `ok()`.
    pub problems: Vec<String>,
    /// Remarks that are not failures (unlisted files, untrusted signers).
    pub notes: Vec<String>,
}

fn path_text<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

impl VerifyReport {
    /// True only when the manifest parses, every listed file exists and
    /// matches, nothing stray looks like a signature, no signature is invalid
    /// or a second one by the same key, and at least one is by a trusted key.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
            && self.manifest.is_some()
            && self.files.iter().all(|f| f.status == FileStatus::Ok)
            && self
                .signatures
                .iter()
                .any(|s| s.status == SigStatus::Trusted)
            && !self.signatures.iter().any(|s| {
                matches!(
                    s.status,
                    SigStatus::Invalid { .. }
                        | SigStatus::Unsupported { .. }
                        | SigStatus::Duplicate { .. }
                )
            })
    }
}

/// Text from the folder (a file name, a reason naming one) or from the command line as it may
/// reach a terminal: an ESC, a line break or a bidi override in a file's name is shown, so that
/// a file cannot draw a line of the report ("VERIFIED").
fn shown(s: &str) -> String {
    crate::console::visible(s)
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {}",
            shown(&self.dir.display().to_string()),
            if self.ok() {
                "verified"
            } else {
                "verification failed"
            }
        )?;
        writeln!(f, "trust: {}", shown(&self.trust))?;
        if let Some(m) = self
            .manifest
            .as_ref()
            .filter(|m| m.kind != ReportKind::Node)
        {
            writeln!(
                f,
                "report: a {} report ({})",
                m.kind.key(),
                m.kind.evidence_file()
            )?;
        }
        match self.simulated {
            Some(true) => writeln!(
                f,
                "simulated: yes. SIMULATED RESULTS: not a certification of real hardware"
            )?,
            Some(false) => writeln!(f, "simulated: no")?,
            None => {}
        }
        for s in &self.signatures {
            let status = match &s.status {
                SigStatus::Trusted => "valid, trusted".to_string(),
                SigStatus::Untrusted { reason } => format!("valid, not trusted: {reason}"),
                SigStatus::Invalid { reason } => format!("invalid: {reason}"),
                SigStatus::Unsupported { reason } => format!("not checked: {reason}"),
                SigStatus::Duplicate { of } => {
                    format!("duplicate: the key of {of} signed again, not a second party")
                }
            };
            write!(f, "signature {}: {}", shown(&s.file), shown(&status))?;
            if let Some(fp) = &s.fingerprint {
                write!(f, " [{}]", shown(fp))?;
            }
            if let Some(p) = &s.principal {
                write!(f, " principal {}", shown(p))?;
            }
            writeln!(f)?;
        }
        for c in &self.files {
            let status = match &c.status {
                FileStatus::Ok => "ok".to_string(),
                FileStatus::Mismatch { actual } => format!(
                    "sha-256 mismatch (manifest {}, file {})",
                    short(&c.expected),
                    short(actual)
                ),
                FileStatus::Missing => "missing".to_string(),
                FileStatus::Unreadable { reason } => format!("unreadable: {reason}"),
            };
            writeln!(f, "file {}: {}", shown(&c.name), shown(&status))?;
        }
        for p in &self.problems {
            writeln!(f, "problem: {}", shown(p))?;
        }
        for n in &self.notes {
            writeln!(f, "note: {}", shown(n))?;
        }
        Ok(())
    }
}

pub(super) enum LoadedTrust {
    Signers(PathBuf, Vec<AllowedSigner>),
    Key(PathBuf, PublicKey),
    None,
}

impl LoadedTrust {
    fn load(trust: &Trust) -> Result<LoadedTrust, SignError> {
        Ok(match trust {
            Trust::AllowedSigners(p) => LoadedTrust::Signers(p.clone(), parse_allowed_signers(p)?),
            Trust::PublicKey(p) => LoadedTrust::Key(p.clone(), read_any_public_key(p)?),
            Trust::Untrusted => LoadedTrust::None,
        })
    }

    fn describe(&self) -> String {
        match self {
            LoadedTrust::Signers(p, s) => {
                format!("allowed signers {} ({} entries)", p.display(), s.len())
            }
            LoadedTrust::Key(p, k) => format!(
                "public key {} ({})",
                p.display(),
                k.fingerprint(HashAlg::Sha256)
            ),
            LoadedTrust::None => {
                "none (untrusted: signatures checked against their own keys only)".to_string()
            }
        }
    }

    /// Ok(principal) when trusted, Err(reason) otherwise.
    fn judge(&self, key: &ssh_key::public::KeyData) -> Result<Option<String>, String> {
        match self {
            LoadedTrust::None => Err("no trusted key was given".into()),
            LoadedTrust::Key(p, k) => {
                if k.key_data() == key {
                    Ok(None)
                } else {
                    Err(format!("key is not the one in {}", p.display()))
                }
            }
            LoadedTrust::Signers(p, signers) => {
                let now = chrono::Utc::now();
                let mut why = None;
                for s in signers
                    .iter()
                    .filter(|s| !s.cert_authority && s.key.key_data() == key)
                {
                    let refused = match &s.namespaces {
                        Some(ns) if !match_pattern_list(NAMESPACE, ns) => format!(
                            "{} is not allowed to sign namespace {NAMESPACE} (namespaces=\"{ns}\")",
                            s.principals
                        ),
                        _ if s.valid_after.is_some_and(|t| now < t)
                            || s.valid_before.is_some_and(|t| now > t) =>
                        {
                            format!("key of {} is outside its validity period", s.principals)
                        }
                        _ => return Ok(Some(s.principals.clone())),
                    };
                    why = Some(format!("{}:{}: {refused}", p.display(), s.line));
                }
                Err(why.unwrap_or_else(|| format!("key is not in {}", p.display())))
            }
        }
    }
}

/// Ok when nodecert can check a signature of this kind; Err says why not.
fn verifiable(sig: &SshSig) -> Result<(), String> {
    let key = sig.public_key();
    let supported = match key.algorithm() {
        Algorithm::Ed25519 | Algorithm::SkEd25519 | Algorithm::SkEcdsaSha2NistP256 => true,
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP256 | EcdsaCurve::NistP384,
        } => true,
        Algorithm::Rsa { .. } => {
            let bits = rsa_bits(key);
            if bits > MAX_RSA_BITS {
                return Err(format!(
                    "signatures by rsa keys of more than {MAX_RSA_BITS} bits (this one: {bits}) are not supported by nodecert; check it with `ssh-keygen -Y verify`"
                ));
            }
            true
        }
        _ => false,
    };
    if supported {
        Ok(())
    } else {
        Err(format!(
            "signatures by {} keys are not supported by nodecert; check it with `ssh-keygen -Y verify`",
            key.algorithm()
        ))
    }
}

fn check_signature(
    at: Place,
    name: &str,
    manifest: Option<&[u8]>,
    trust: &LoadedTrust,
) -> SignatureCheck {
    let path = &at.shown(name);
    let mut check = SignatureCheck {
        file: name.to_string(),
        fingerprint: None,
        principal: None,
        status: SigStatus::Invalid {
            reason: String::new(),
        },
    };
    let invalid = |mut c: SignatureCheck, reason: String| {
        c.status = SigStatus::Invalid { reason };
        c
    };
    // A signature file of the folder: a link out of it is not followed.
    let bytes = match crate::fsio::read::open(&at.read(name), false)
        .and_then(|f| crate::fsio::read::read_limited(f, MAX_SIGNATURE_BYTES, "this file"))
        .map_err(io_err("read", path))
    {
        Ok(b) => b,
        Err(e) => return invalid(check, e.to_string()),
    };
    let unsupported = |mut c: SignatureCheck, reason: String| {
        c.status = SigStatus::Unsupported { reason };
        c
    };
    // OpenSSH reads CRLF signatures and ignores what surrounds the armor; so do we.
    let text = normalize_armor(&bytes);
    let sig = match SshSig::from_pem(&text) {
        Ok(s) => s,
        Err(e @ (ssh_key::Error::AlgorithmUnknown | ssh_key::Error::AlgorithmUnsupported { .. })) => {
            return unsupported(
                check,
                format!(
                    "signature of a kind nodecert cannot read ({}); check it with `ssh-keygen -Y verify`",
                    lowercase(&e)
                ),
            )
        }
        Err(e) => {
            return invalid(
                check,
                format!("not an ssh signature ({})", lowercase(&e)),
            )
        }
    };
    check.fingerprint = Some(sig.public_key().fingerprint(HashAlg::Sha256).to_string());
    // Otherwise accept only the exact form OpenSSH writes, so no byte can change unnoticed.
    if !is_canonical_armor(&sig, &text) {
        return invalid(
            check,
            "not in the form ssh-keygen writes (altered armor, base64 or line breaks)".into(),
        );
    }
    if sig.namespace() != NAMESPACE {
        return invalid(
            check,
            format!("namespace is {:?}, expected {NAMESPACE:?}", sig.namespace()),
        );
    }
    if let Err(reason) = verifiable(&sig) {
        return unsupported(check, reason);
    }
    let Some(manifest) = manifest else {
        return invalid(
            check,
            format!("cannot be checked: {MANIFEST_FILE} is missing"),
        );
    };
    let key = PublicKey::from(sig.public_key().clone());
    if let Err(e) = key.verify(NAMESPACE, manifest, &sig) {
        return match e {
            ssh_key::Error::AlgorithmUnknown | ssh_key::Error::AlgorithmUnsupported { .. } => {
                unsupported(
                    check,
                    format!(
                        "{} signatures are not supported by nodecert; check it with `ssh-keygen -Y verify`",
                        sig.algorithm()
                    ),
                )
            }
            _ => invalid(check, format!("does not match {MANIFEST_FILE}")),
        };
    }
    if is_security_key(&sig.algorithm()) && sk_flags(&sig) & SK_USER_PRESENT == 0 {
        return invalid(
            check,
            "made by a security key without a touch (no user-presence flag), which OpenSSH refuses"
                .into(),
        );
    }
    match trust.judge(sig.public_key()) {
        Ok(principal) => {
            check.principal = principal;
            check.status = SigStatus::Trusted;
        }
        Err(reason) => check.status = SigStatus::Untrusted { reason },
    }
    check
}

/// Check manifest, files and signatures; everything except the final
/// "at least one trusted signature" rule. Returns the manifest bytes read.
pub(super) fn inspect(
    at: Place,
    trust: &LoadedTrust,
) -> Result<(VerifyReport, Option<Vec<u8>>), SignError> {
    let dir = at.shown;
    let mut r = VerifyReport {
        dir: dir.to_path_buf(),
        trust: trust.describe(),
        manifest: None,
        simulated: None,
        files: Vec::new(),
        signatures: Vec::new(),
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let mut entries: Vec<String> = Vec::new();
    // A name that is not UTF-8 can be neither listed nor a signature: a file the manifest does
    // not cover, said as the others are.
    let mut not_utf8: Vec<String> = Vec::new();
    for entry in fs::read_dir(at.read).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        let name = entry.file_name();
        match name.to_str() {
            Some(n) => entries.push(n.to_string()),
            None => not_utf8.push(format!(
                "{} (name not utf-8)",
                shown(&name.to_string_lossy())
            )),
        }
    }
    entries.sort();
    not_utf8.sort();

    let manifest_bytes = match read_limited_in(at, MANIFEST_FILE, MAX_MANIFEST_BYTES, "read") {
        Ok(b) => Some(b),
        Err(SignError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            r.problems.push(format!("{MANIFEST_FILE}: missing"));
            None
        }
        Err(e) => {
            r.problems.push(format!("{MANIFEST_FILE}: {e}"));
            None
        }
    };
    if let Some(bytes) = &manifest_bytes {
        match std::str::from_utf8(bytes)
            .map_err(|_| "not utf-8 text".to_string())
            .and_then(Manifest::parse)
        {
            Ok(m) => {
                r.simulated = Some(m.simulated);
                r.manifest = Some(m);
            }
            Err(e) => r.problems.push(format!("{MANIFEST_FILE}: {e}")),
        }
    }

    if let Some(m) = &r.manifest {
        let mut budget = m.kind.read_budget();
        for (name, expected) in &m.files {
            let status = match sha256_in(at.read, name, &mut budget) {
                Ok(h) if h == *expected => FileStatus::Ok,
                Ok(actual) => {
                    r.problems.push(format!(
                        "{name}: sha-256 mismatch (manifest {}, file {})",
                        short(expected),
                        short(&actual)
                    ));
                    FileStatus::Mismatch { actual }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    r.problems.push(format!("{name}: missing"));
                    FileStatus::Missing
                }
                Err(e) => {
                    let reason = lower(&e);
                    r.problems.push(format!("{name}: unreadable: {reason}"));
                    FileStatus::Unreadable { reason }
                }
            };
            r.files.push(FileCheck {
                name: name.clone(),
                expected: expected.clone(),
                status,
            });
        }
        // The evidence's own flag must agree with the manifest.
        let primary = m.kind.evidence_file();
        if r.files
            .iter()
            .any(|f| f.name == primary && f.status == FileStatus::Ok)
        {
            match evidence_simulated(m.kind, at) {
                Ok(Some(b)) if b != m.simulated => r.problems.push(format!(
                    "{primary}: says simulated: {b} but {MANIFEST_FILE} says simulated: {}",
                    m.simulated
                )),
                Ok(_) => {}
                Err(e) => r.problems.push(e.to_string()),
            }
        }
    }

    // Signatures, stray signature-like files, unlisted files.
    let listed_tops: BTreeSet<&str> = r
        .manifest
        .iter()
        .flat_map(|m| m.files.iter())
        .map(|(n, _)| n.split('/').next().unwrap_or(n))
        .collect();
    let mut sig_names = Vec::new();
    let mut unlisted = Vec::new();
    for name in &entries {
        if name == MANIFEST_FILE {
            continue;
        }
        if is_signature_name(name) {
            sig_names.push(name.clone());
        } else if name.starts_with(MANIFEST_FILE) || name.ends_with(".sig") {
            r.problems.push(format!(
                "{}: unexpected signature-like file (signatures are named {SIGNATURE_FILE} or {MANIFEST_FILE}.N.sig)",
                shown(name)
            ));
        } else if !listed_tops.contains(name.as_str()) {
            unlisted.push(name.clone());
        }
    }
    // The other kind's evidence file beside a manifest that does not list it: the folder would
    // pass for what the signature never covered (a fleet's signed files copied beside a node's
    // forged evidence.json, read by `fleet report` as that node's).
    if let Some(m) = &r.manifest {
        for other in [ReportKind::Node, ReportKind::Fleet] {
            let name = other.evidence_file();
            if other != m.kind && unlisted.iter().any(|u| u == name) {
                r.problems.push(format!(
                    "{name}: not covered by this {} manifest, yet the folder holds one: the signature does not seal it",
                    m.kind.key()
                ));
            }
        }
    }
    if (!unlisted.is_empty() || !not_utf8.is_empty()) && r.manifest.is_some() {
        let mut names: Vec<String> = unlisted.iter().map(|n| shown(n)).collect();
        names.extend(not_utf8);
        r.notes.push(format!(
            "not covered by the manifest (unsigned): {}",
            names.join(", ")
        ));
    }
    sig_names.sort_by_key(|n| signature_index(n).unwrap_or(1));
    if let Some(last) = sig_names.last().and_then(|n| signature_index(n)) {
        // Counted, not walked: a file named ".4294967295.sig" must not make billions of lines.
        let present: BTreeSet<u32> = sig_names
            .iter()
            .map(|n| signature_index(n).unwrap_or(1))
            .collect();
        let missing = u64::from(last - 1) - present.range(1..last).count() as u64;
        let shown: Vec<String> = (1..last)
            .filter(|i| !present.contains(i))
            .take(MISSING_SHOWN)
            .map(signature_name)
            .collect();
        let more = missing - shown.len() as u64;
        if more == 0 {
            for expected in shown {
                r.problems.push(format!(
                    "{expected}: missing, but a later countersignature exists"
                ));
            }
        } else {
            r.problems.push(format!(
                "{} and {more} more: missing, but a later countersignature exists",
                shown.join(", ")
            ));
        }
    }
    // One key is one party: a second valid signature by a key that already signed (a copied
    // .sig, or the same key signing again) is not a countersignature, and a folder that shows
    // it as one claims a party that does not exist.
    let mut first_by_key: BTreeMap<String, String> = BTreeMap::new();
    for name in &sig_names {
        let mut c = check_signature(at, name, manifest_bytes.as_deref(), trust);
        if let (SigStatus::Trusted | SigStatus::Untrusted { .. }, Some(fp)) =
            (&c.status, &c.fingerprint)
        {
            match first_by_key.get(fp) {
                Some(first) => c.status = SigStatus::Duplicate { of: first.clone() },
                None => {
                    first_by_key.insert(fp.clone(), name.clone());
                }
            }
        }
        match &c.status {
            SigStatus::Invalid { reason } | SigStatus::Unsupported { reason } => {
                r.problems.push(format!("{name}: {reason}"))
            }
            SigStatus::Duplicate { of } => r.problems.push(format!(
                "{name}: a second signature by the key that made {of} ({}): one key is one party, \
so it is not a countersignature; remove it",
                c.fingerprint.as_deref().unwrap_or("?")
            )),
            SigStatus::Untrusted { reason } => r.notes.push(format!(
                "{name}: valid signature by {} but not trusted: {reason}",
                c.fingerprint.as_deref().unwrap_or("?")
            )),
            SigStatus::Trusted => {}
        }
        r.signatures.push(c);
    }
    Ok((r, manifest_bytes))
}

/// Verify a signed report directory against `trust`. Errors only when the
/// directory cannot be listed or the trust input cannot be read; everything
/// wrong with the directory's contents is in the report.
pub fn verify_dir(dir: &Path, trust: &Trust) -> Result<VerifyReport, SignError> {
    let trust = LoadedTrust::load(trust)?;
    let (mut r, _) = inspect(Place::at(dir), &trust)?;
    if r.signatures.is_empty() {
        r.problems.push(format!(
            "{SIGNATURE_FILE}: missing (the report is not signed)"
        ));
    } else if !r.signatures.iter().any(|s| s.status == SigStatus::Trusted) {
        r.problems.push(match trust {
            LoadedTrust::None => {
                "no trusted signer: no allowed signers or public key was given, so nothing is verified"
                    .to_string()
            }
            _ => "no signature is by a trusted key".to_string(),
        });
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `verify --json` of a folder whose name is not UTF-8 shows the name, not an error.
    #[test]
    fn a_folder_name_that_is_not_utf8_serializes_as_text() {
        use std::os::unix::ffi::OsStrExt;
        let r = VerifyReport {
            dir: PathBuf::from(std::ffi::OsStr::from_bytes(b"cert-\xff")),
            trust: "none".into(),
            manifest: None,
            simulated: None,
            files: vec![],
            signatures: vec![],
            problems: vec![],
            notes: vec![],
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["dir"], "cert-\u{fffd}");
    }
}
