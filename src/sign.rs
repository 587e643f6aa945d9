//! Signing and verifying a nodecert report directory with SSH signatures.
//!
//! A report directory (`evidence.json`, `report.html`, `report.md`, ...) is
//! sealed by a text manifest, [`MANIFEST_FILE`], that lists the SHA-256 of
//! every file, and by one or more detached SSH signatures over that manifest
//! (the SSHSIG format that `ssh-keygen -Y sign` writes, namespace
//! [`NAMESPACE`], SHA-512 message hash). nodecert signs with Ed25519, ECDSA
//! P-256/P-384 and RSA keys (rsa-sha2-512, as ssh-keygen does; up to 4096
//! bits) and also verifies signatures of security keys (sk-ssh-ed25519,
//! sk-ecdsa-sha2-nistp256), which only `ssh-keygen -Y sign` can make, since
//! their private half stays on the token. Anyone can check a
//! report with stock OpenSSH and coreutils, without nodecert:
//!
//! ```text
//! ssh-keygen -Y verify -f allowed_signers -I IDENTITY -n nodecert \
//!     -s DIR/nodecert-manifest.txt.sig < DIR/nodecert-manifest.txt
//! cd DIR && sha256sum -c nodecert-manifest.txt
//! ```
//!
//! # Manifest format (`nodecert-manifest-1`)
//!
//! UTF-8 text, `\n` line endings, ending in `\n`, no blank lines. Every line is
//! either a comment (starts with `#`) or a digest line in the format of
//! `sha256sum`: 64 lowercase hex digits, two spaces, the file name relative to
//! the report directory. `sha256sum -c` ignores the comment lines, so it can
//! check the digests as is.
//!
//! Comment lines of the form `# key: value` (key of `a-z`, `0-9`, `-`) are
//! metadata. The first line must be `# format: nodecert-manifest-1`; the
//! keys `nodecert-version`, `evidence-sha256` (equal to the digest line of
//! `evidence.json`, which must be listed) and `simulated` (`true` or `false`)
//! are required, once each; unknown keys are ignored. When `simulated` is
//! `true` the manifest must contain the line [`SIMULATED_WARNING`], and must
//! not otherwise. Other comment lines are free text for humans. Example:
//!
//! ```text
//! # format: nodecert-manifest-1
//! # nodecert-version: 0.1.0
//! # evidence-sha256: 5f0c…
//! # simulated: true
//! # WARNING: SIMULATED RESULTS. ... not a certification of real hardware.
//! # (how to check, as free text)
//! 5f0c…  evidence.json
//! 9a1b…  report.html
//! 77de…  report.md
//! ```
//!
//! File names are relative paths without `.`/`..` components, backslashes,
//! control characters or surrounding white space, and never the manifest or a
//! `.sig` file.
//!
//! # Signatures and countersignatures
//!
//! The first signature is `nodecert-manifest.txt.sig`, as `ssh-keygen -Y sign`
//! names it. A second party countersigns the same manifest bytes into
//! `nodecert-manifest.txt.2.sig`, then `.3.sig`, ...; a countersignature never
//! rewrites the manifest or another signature. Signing twice with the same key
//! is an error ([`SignError::AlreadySigned`]). Before signing, [`sign_dir`]
//! checks that every digest matches and every existing signature is valid, so
//! nobody signs a report that has already been altered.
//!
//! # Verification
//!
//! [`verify_dir`] reports every file digest and every signature;
//! [`VerifyReport::ok`] holds only when the manifest parses, every listed file
//! exists and matches, no stray signature-like file lies in the directory, no
//! signature is invalid, and at least one signature is by a trusted key
//! ([`Trust::Untrusted`] therefore never verifies). Signature files must be in
//! the exact form OpenSSH writes (PEM, 70-column base64), so any changed byte
//! makes a signature invalid; as with OpenSSH, `\r\n` line breaks (a file
//! converted for Windows or sent by mail) and white space around the armor
//! are accepted. A security key signature must carry the user-presence flag.
//! A signature nodecert cannot check (another key type) is
//! [`SigStatus::Unsupported`] and, like an invalid one, fails verification.
//! Files in the directory that the manifest does not list are mentioned as
//! notes but are not failures.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};
use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};

/// SSHSIG namespace of nodecert signatures (`ssh-keygen -n nodecert`).
pub const NAMESPACE: &str = "nodecert";
/// Name of the manifest inside a report directory.
pub const MANIFEST_FILE: &str = "nodecert-manifest.txt";
/// Name of the first signature, as `ssh-keygen -Y sign` names it.
pub const SIGNATURE_FILE: &str = "nodecert-manifest.txt.sig";
/// Value of the manifest's first line, `# format: ...`.
pub const MANIFEST_FORMAT: &str = "nodecert-manifest-1";
/// The evidence file whose digest and `simulated` flag the manifest records.
pub const EVIDENCE_FILE: &str = crate::evidence::EVIDENCE_FILE;
/// The files [`sign_dir`] lists when it writes the manifest itself (those present;
/// `evidence.json` is required).
pub const DEFAULT_FILES: [&str; 3] = [EVIDENCE_FILE, "report.html", "report.md"];
/// The line a manifest of simulated results carries.
pub const SIMULATED_WARNING: &str =
    "# WARNING: SIMULATED RESULTS. These files come from nodecert's \
simulator: they are not a certification of real hardware.";

const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;
const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
const MAX_KEY_BYTES: u64 = 64 * 1024;
const MAX_TRUST_BYTES: u64 = 4 * 1024 * 1024;

/// Errors of this module. Messages are lowercase and name the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("cannot {action} {}: {}", .path.display(), lower(.source))]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("refusing to overwrite existing file {}", .0.display())]
    Exists(PathBuf),
    #[error("{}: {reason}", .path.display())]
    Key { path: PathBuf, reason: String },
    #[error("{}: encrypted private keys are not supported (sign with `ssh-keygen -Y sign`, or use an unencrypted key)", .0.display())]
    EncryptedKey(PathBuf),
    #[error("{}: {reason}", .path.display())]
    Evidence { path: PathBuf, reason: String },
    #[error("{}: {reason}", .path.display())]
    Manifest { path: PathBuf, reason: String },
    #[error("invalid file name {name:?}: {reason}")]
    FileName { name: String, reason: String },
    #[error("invalid comment: {0}")]
    Comment(String),
    #[error("invalid identity {identity:?}: {reason}")]
    Identity { identity: String, reason: String },
    #[error("{}: already signed by this key ({fingerprint})", .path.display())]
    AlreadySigned { path: PathBuf, fingerprint: String },
    #[error("refusing to sign {}: {}", .dir.display(), .problems.join("; "))]
    NotSignable { dir: PathBuf, problems: Vec<String> },
    #[error("{}:{line}: {reason}", .path.display())]
    AllowedSigners {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{}: signing failed: {reason}", .path.display())]
    Signing { path: PathBuf, reason: String },
}

fn lower(e: &dyn fmt::Display) -> String {
    let s = e.to_string();
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SignError + 'a {
    move |source| SignError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// A freshly generated key pair.
#[derive(Debug, Clone, Serialize)]
pub struct KeyInfo {
    pub private_key: PathBuf,
    pub public_key: PathBuf,
    /// The `.pub` line, e.g. `ssh-ed25519 AAAA... comment`.
    pub public_key_line: String,
    /// As `ssh-keygen -l` prints it: `SHA256:...`.
    pub fingerprint: String,
}

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

// ---------------------------------------------------------------------------
// keys

fn pub_path(out: &Path) -> PathBuf {
    let mut s = OsString::from(out.as_os_str());
    s.push(".pub");
    PathBuf::from(s)
}

/// A regular file of at most `limit` bytes (a FIFO or a device is refused, never read).
fn read_limited(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, SignError> {
    crate::fsio::read::open(path, true)
        .and_then(|f| crate::fsio::read::read_limited(f, limit, "this file"))
        .map_err(io_err(what, path))
}

/// `read_limited` for the file `rel` of a report folder: no symbolic link below `dir` is followed.
fn read_limited_in(
    dir: &Path,
    rel: &str,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, SignError> {
    let path = dir.join(rel);
    crate::fsio::read::open_in(dir, rel)
        .and_then(|f| crate::fsio::read::read_limited(f, limit, "this file"))
        .map_err(io_err(what, &path))
}

fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<(), SignError> {
    map_new(path, crate::fsio::write::create_new(path, data, mode))
}

/// A signature in a report folder: created only if absent, the folder not entered via a link.
fn write_new_in_report(path: &Path, data: &[u8], mode: u32) -> Result<(), SignError> {
    map_new(
        path,
        crate::fsio::write::create_new_in_report(path, data, mode),
    )
}

fn map_new(path: &Path, r: io::Result<()>) -> Result<(), SignError> {
    r.map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            SignError::Exists(path.to_path_buf())
        } else {
            io_err("create", path)(e)
        }
    })
}

fn key_err(path: &Path, reason: impl Into<String>) -> SignError {
    SignError::Key {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Generate an Ed25519 key pair: the OpenSSH private key at `out` (mode 0600,
/// unencrypted) and the public key at `out` + `.pub`. Refuses to overwrite
/// either file.
pub fn keygen(out: &Path, comment: &str) -> Result<KeyInfo, SignError> {
    if comment.chars().any(|c| c.is_control()) {
        return Err(SignError::Comment(
            "must not contain control characters or line breaks".into(),
        ));
    }
    let public = pub_path(out);
    for p in [out, public.as_path()] {
        if p.symlink_metadata().is_ok() {
            return Err(SignError::Exists(p.to_path_buf()));
        }
    }
    let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
        .map_err(|e| key_err(out, format!("key generation failed: {}", lower(&e))))?;
    key.set_comment(comment);
    let pem = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| key_err(out, format!("cannot encode private key: {}", lower(&e))))?;
    let line = key
        .public_key()
        .to_openssh()
        .map_err(|e| key_err(&public, format!("cannot encode public key: {}", lower(&e))))?;
    write_new(out, pem.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public, format!("{line}\n").as_bytes(), 0o644) {
        let _ = fs::remove_file(out);
        return Err(e);
    }
    Ok(KeyInfo {
        private_key: out.to_path_buf(),
        public_key: public,
        public_key_line: line,
        fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
    })
}

fn is_private_pem(text: &str) -> bool {
    text.trim_start()
        .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
}

/// Read the public key of a private (OpenSSH format) or public key file.
fn read_any_public_key(path: &Path) -> Result<PublicKey, SignError> {
    let bytes = read_limited(path, MAX_KEY_BYTES, "read key")?;
    let text = String::from_utf8(bytes).map_err(|_| key_err(path, "not a text key file"))?;
    if is_private_pem(&text) {
        let k = PrivateKey::from_openssh(&text).map_err(|e| {
            key_err(
                path,
                format!("not an openssh private key: {}", lower(&e).to_lowercase()),
            )
        })?;
        Ok(k.public_key().clone())
    } else {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| key_err(path, "no public key found"))?;
        PublicKey::from_openssh(line).map_err(|e| {
            key_err(
                path,
                format!("not an openssh public key: {}", lower(&e).to_lowercase()),
            )
        })
    }
}

fn read_signing_key(path: &Path) -> Result<PrivateKey, SignError> {
    let bytes = read_limited(path, MAX_KEY_BYTES, "read private key")?;
    let text = String::from_utf8(bytes).map_err(|_| key_err(path, "not a text key file"))?;
    if !is_private_pem(&text) {
        return Err(key_err(
            path,
            "not an openssh private key (give the private key, not the .pub)",
        ));
    }
    let key = PrivateKey::from_openssh(&text).map_err(|e| {
        key_err(
            path,
            format!("not an openssh private key: {}", lower(&e).to_lowercase()),
        )
    })?;
    if key.is_encrypted() {
        return Err(SignError::EncryptedKey(path.to_path_buf()));
    }
    check_signing_algorithm(path, &key)?;
    Ok(key)
}

/// Largest RSA modulus the rsa crate accepts (bits).
const MAX_RSA_BITS: usize = 4096;

/// The modulus size of an RSA public key, in bits (0 for other keys).
fn rsa_bits(key: &ssh_key::public::KeyData) -> usize {
    key.rsa()
        .and_then(|k| k.n.as_positive_bytes())
        .map_or(0, |n| n.len() * 8)
}

/// The key types nodecert signs with: Ed25519, ECDSA P-256/P-384, RSA (as
/// rsa-sha2-512, as `ssh-keygen -Y sign` does). Security keys sign only on
/// their token, so they are sent to `ssh-keygen -Y sign`.
fn check_signing_algorithm(path: &Path, key: &PrivateKey) -> Result<(), SignError> {
    let algorithm = key.algorithm();
    match &algorithm {
        Algorithm::Ed25519 => Ok(()),
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP256 | EcdsaCurve::NistP384,
        } => Ok(()),
        Algorithm::Rsa { .. } => {
            let bits = rsa_bits(key.public_key().key_data());
            if bits > MAX_RSA_BITS {
                return Err(key_err(
                    path,
                    format!(
                        "rsa keys of more than {MAX_RSA_BITS} bits are not supported (this one has {bits}); sign with `ssh-keygen -Y sign -n {NAMESPACE}`, or use an ed25519 key"
                    ),
                ));
            }
            Ok(())
        }
        sk if is_security_key(sk) => Err(key_err(
            path,
            format!(
                "{algorithm} is a security key (FIDO): its private half never leaves the token, so nodecert cannot sign with it; \
sign with `ssh-keygen -Y sign -n {NAMESPACE} -f KEY < DIR/{MANIFEST_FILE} > DIR/{MANIFEST_FILE}.N.sig` \
(N = 2, 3, ... for a countersignature, or {SIGNATURE_FILE} for the first) and check it with `nodecert verify`"
            ),
        )),
        other => Err(key_err(
            path,
            format!(
                "key type {other} is not supported for signing (use ed25519, ecdsa nistp256/nistp384 or rsa)"
            ),
        )),
    }
}

/// Check that `key` is a private key [`sign_dir`] can use, before any work is
/// done with it. Returns its fingerprint and its comment.
pub fn signing_key_info(key: &Path) -> Result<(String, String), SignError> {
    let k = read_signing_key(key)?;
    Ok((
        k.fingerprint(HashAlg::Sha256).to_string(),
        k.comment().to_string(),
    ))
}

/// True when `identity` can stand as a principal in an allowed_signers line.
pub fn is_valid_identity(identity: &str) -> bool {
    check_identity(identity).is_ok()
}

/// The SHA256 fingerprint (`SHA256:...`, as `ssh-keygen -l` prints it) of a
/// private or public key file.
pub fn key_fingerprint(key: &Path) -> Result<String, SignError> {
    Ok(read_any_public_key(key)?
        .fingerprint(HashAlg::Sha256)
        .to_string())
}

// ---------------------------------------------------------------------------
// manifest

/// A parsed manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub format: String,
    pub nodecert_version: String,
    pub evidence_sha256: String,
    pub simulated: bool,
    /// `(file name, sha-256 hex)` in manifest order.
    pub files: Vec<(String, String)>,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_signature_name(name: &str) -> bool {
    if name == SIGNATURE_FILE {
        return true;
    }
    signature_index(name).is_some()
}

/// `nodecert-manifest.txt.<n>.sig` with n >= 2, no leading zero.
fn signature_index(name: &str) -> Option<u32> {
    let mid = name
        .strip_prefix(MANIFEST_FILE)?
        .strip_prefix('.')?
        .strip_suffix(".sig")?;
    if mid.is_empty() || mid.starts_with('0') || !mid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    mid.parse().ok().filter(|n| *n >= 2)
}

fn signature_name(index: u32) -> String {
    if index <= 1 {
        SIGNATURE_FILE.to_string()
    } else {
        format!("{MANIFEST_FILE}.{index}.sig")
    }
}

fn check_file_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty".into());
    }
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return Err("contains a control character or backslash".into());
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
        match files.iter().find(|(n, _)| n == EVIDENCE_FILE) {
            None => return Err(format!("{EVIDENCE_FILE} is not listed")),
            Some((_, h)) if *h != evidence_sha256 => {
                return Err(format!(
                    "evidence-sha256 {} differs from the digest listed for {EVIDENCE_FILE} {}",
                    short(&evidence_sha256),
                    short(h)
                ))
            }
            Some(_) => {}
        }
        Ok(Manifest {
            format: MANIFEST_FORMAT.to_string(),
            nodecert_version,
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

fn short(hex: &str) -> String {
    format!("{}…", &hex[..hex.len().min(12)])
}

/// SHA-256 of a regular file, lowercase hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    sha256_of(crate::fsio::read::open(path, true)?)
}

/// SHA-256 of the regular file `rel` of the folder `dir`, following no symbolic link below it.
pub fn sha256_in(dir: &Path, rel: &str) -> io::Result<String> {
    sha256_of(crate::fsio::read::open_in(dir, rel)?)
}

fn sha256_of(mut f: fs::File) -> io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Whether evidence.json is simulated, from all its records ([`crate::evidence::simulated_status`]).
fn evidence_simulated(path: &Path) -> Result<Option<bool>, SignError> {
    let bytes = crate::fsio::read::read(path, crate::fsio::read::Kind::Evidence)
        .map_err(io_err("read", path))?;
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

fn existing_signatures(dir: &Path) -> Result<Vec<String>, SignError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        if let Some(name) = entry.file_name().to_str() {
            if is_signature_name(name) {
                out.push(name.to_string());
            }
        }
    }
    out.sort_by_key(|n| signature_index(n).unwrap_or(1));
    Ok(out)
}

/// Write `dir/`[`MANIFEST_FILE`] listing the SHA-256 of `files` (names relative
/// to `dir`; `evidence.json` must be one of them). Replaces an existing
/// manifest only while no signature exists. Returns the manifest path.
pub fn write_manifest(
    dir: &Path,
    files: &[&str],
    meta: &ManifestMeta,
) -> Result<PathBuf, SignError> {
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
    if !seen.contains(EVIDENCE_FILE) {
        return Err(SignError::Manifest {
            path: manifest_path,
            reason: format!("{EVIDENCE_FILE} must be among the listed files"),
        });
    }
    if meta.nodecert_version.is_empty() || meta.nodecert_version.chars().any(|c| c.is_control()) {
        return Err(SignError::Manifest {
            path: manifest_path,
            reason: "nodecert version is empty or contains control characters".into(),
        });
    }
    if let Some(sig) = existing_signatures(dir)?.first() {
        return Err(SignError::Manifest {
            path: manifest_path,
            reason: format!("already signed ({sig}); a signed manifest is never rewritten"),
        });
    }
    let evidence_path = dir.join(EVIDENCE_FILE);
    let from_evidence = evidence_simulated(&evidence_path)?;
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
    for name in files {
        let p = dir.join(name);
        let h = sha256_in(dir, name).map_err(io_err("read", &p))?;
        entries.push((name.to_string(), h));
    }
    let evidence_sha256 = entries
        .iter()
        .find(|(n, _)| n == EVIDENCE_FILE)
        .map(|(_, h)| h.clone())
        .unwrap_or_default();
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_string(),
        nodecert_version: meta.nodecert_version.clone(),
        evidence_sha256,
        simulated,
        files: entries,
    };
    let text = manifest.render();
    debug_assert_eq!(Manifest::parse(&text).as_ref(), Ok(&manifest));
    crate::fsio::write::replace_in_report(&manifest_path, text.as_bytes())
        .map_err(io_err("write", &manifest_path))?;
    Ok(manifest_path)
}

// ---------------------------------------------------------------------------
// allowed_signers

#[derive(Debug, Clone)]
struct AllowedSigner {
    line: usize,
    principals: String,
    cert_authority: bool,
    namespaces: Option<String>,
    valid_after: Option<chrono::DateTime<chrono::Utc>>,
    valid_before: Option<chrono::DateTime<chrono::Utc>>,
    key: PublicKey,
}

/// Split off the next white-space-delimited token, honouring double quotes.
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    let mut in_quote = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => in_quote = !in_quote,
            ' ' | '\t' if !in_quote => return Some((&s[..i], &s[i..])),
            _ => {}
        }
    }
    Some((s, ""))
}

/// OpenSSH `match_pattern` (`*` and `?` wildcards).
fn match_pattern(s: &str, pat: &str) -> bool {
    // Iterative, remembering only the last '*': at most len(s) * len(pat) steps and no
    // recursion, whatever the pattern (a million '*', or 80 of them before a literal).
    let s: Vec<char> = s.chars().collect();
    let p: Vec<char> = pat.chars().collect();
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match p.get(j) {
            Some('*') => {
                star = Some((j, i));
                j += 1;
            }
            Some(&c) if c == '?' || c == s[i] => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((sj, si)) => {
                    j = sj + 1;
                    i = si + 1;
                    star = Some((sj, si + 1));
                }
                None => return false,
            },
        }
    }
    p[j..].iter().all(|c| *c == '*')
}

/// OpenSSH `match_pattern_list`: comma-separated, `!` negates and wins.
fn match_pattern_list(s: &str, list: &str) -> bool {
    let mut matched = false;
    for pat in list.split(',') {
        if let Some(neg) = pat.strip_prefix('!') {
            if match_pattern(s, neg) {
                return false;
            }
        } else if match_pattern(s, pat) {
            matched = true;
        }
    }
    matched
}

fn parse_signer_time(v: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    use chrono::{NaiveDate, NaiveDateTime, TimeZone};
    let (digits, utc) = match v.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (v, false),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(format!("invalid time {v:?} (want YYYYMMDD[HHMM[SS]][Z])"));
    }
    let num =
        |r: std::ops::Range<usize>| digits.get(r).map_or(0, |x| x.parse::<u32>().unwrap_or(0));
    let date = NaiveDate::from_ymd_opt(num(0..4) as i32, num(4..6), num(6..8))
        .ok_or_else(|| format!("invalid date {v:?}"))?;
    let naive: NaiveDateTime = date
        .and_hms_opt(num(8..10), num(10..12), num(12..14))
        .ok_or_else(|| format!("invalid time {v:?}"))?;
    if utc {
        Ok(chrono::Utc.from_utc_datetime(&naive))
    } else {
        chrono::Local
            .from_local_datetime(&naive)
            .earliest()
            .map(|t| t.with_timezone(&chrono::Utc))
            .ok_or_else(|| format!("invalid local time {v:?}"))
    }
}

fn unquote(v: &str) -> Result<&str, String> {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .filter(|v| !v.contains('"'))
        .ok_or_else(|| format!("option value {v} must be in double quotes"))
}

fn parse_signer_options(opts: &str, s: &mut AllowedSigner) -> Result<(), String> {
    // Split on commas outside quotes.
    let mut parts = Vec::new();
    let mut start = 0;
    let mut in_quote = false;
    for (i, c) in opts.char_indices() {
        match c {
            '"' => in_quote = !in_quote,
            ',' if !in_quote => {
                parts.push(&opts[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_quote {
        return Err("unbalanced quotes in options".into());
    }
    parts.push(&opts[start..]);
    for part in parts {
        let (name, value) = match part.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (part, None),
        };
        match (name.to_ascii_lowercase().as_str(), value) {
            ("cert-authority", None) => s.cert_authority = true,
            ("namespaces", Some(v)) => s.namespaces = Some(unquote(v)?.to_string()),
            ("valid-after", Some(v)) => s.valid_after = Some(parse_signer_time(unquote(v)?)?),
            ("valid-before", Some(v)) => s.valid_before = Some(parse_signer_time(unquote(v)?)?),
            _ => return Err(format!("unknown option {part:?}")),
        }
    }
    Ok(())
}

fn looks_like_key_type(tok: &str) -> bool {
    tok.starts_with("ssh-")
        || tok.starts_with("ecdsa-")
        || tok.starts_with("sk-")
        || tok.starts_with("rsa-")
}

fn parse_allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>, SignError> {
    let bytes = read_limited(path, MAX_TRUST_BYTES, "read allowed signers file")?;
    let text = String::from_utf8(bytes).map_err(|_| SignError::AllowedSigners {
        path: path.to_path_buf(),
        line: 0,
        reason: "not utf-8 text".into(),
    })?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |reason: String| SignError::AllowedSigners {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        let line = raw.trim_matches([' ', '\t', '\r']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (principals, rest) = next_token(line).ok_or_else(|| err("empty line".into()))?;
        let principals = principals
            .strip_prefix('"')
            .and_then(|p| p.strip_suffix('"'))
            .unwrap_or(principals);
        let mut signer = AllowedSigner {
            line: line_no,
            principals: principals.to_string(),
            cert_authority: false,
            namespaces: None,
            valid_after: None,
            valid_before: None,
            key: PublicKey::from(ssh_key::public::KeyData::Ed25519(
                ssh_key::public::Ed25519PublicKey([0; 32]),
            )),
        };
        let (tok, after) = next_token(rest).ok_or_else(|| err("missing key".into()))?;
        let key_text = if looks_like_key_type(tok) {
            rest
        } else {
            parse_signer_options(tok, &mut signer).map_err(err)?;
            if next_token(after).is_none() {
                return Err(err("missing key".into()));
            }
            after
        };
        signer.key = PublicKey::from_openssh(key_text.trim())
            .map_err(|e| err(format!("invalid public key: {}", lower(&e).to_lowercase())))?;
        out.push(signer);
    }
    Ok(out)
}

/// An allowed_signers line trusting the public key in `public_key` (a `.pub`
/// or private key file) as `identity`, for the nodecert namespace only.
pub fn allowed_signers_line(public_key: &Path, identity: &str) -> Result<String, SignError> {
    let key = read_any_public_key(public_key)?;
    allowed_signers_line_for(&key, identity)
}

/// Like [`allowed_signers_line`], from a parsed key.
pub fn allowed_signers_line_for(key: &PublicKey, identity: &str) -> Result<String, SignError> {
    check_identity(identity)?;
    let mut key = key.clone();
    key.set_comment("");
    let k = key.to_openssh().map_err(|e| SignError::Identity {
        identity: identity.to_string(),
        reason: format!("cannot encode key: {}", lower(&e)),
    })?;
    Ok(format!("{identity} namespaces=\"{NAMESPACE}\" {k}"))
}

fn check_identity(identity: &str) -> Result<(), SignError> {
    let bad = |reason: &str| SignError::Identity {
        identity: identity.to_string(),
        reason: reason.to_string(),
    };
    if identity.is_empty() {
        return Err(bad("empty"));
    }
    if identity.chars().any(|c| {
        c.is_whitespace() || c.is_control() || matches!(c, '"' | ',' | '*' | '?' | '!' | '\'')
    }) {
        return Err(bad(
            "must not contain white space, quotes, commas or the pattern characters * ? !",
        ));
    }
    if identity.starts_with('#') {
        return Err(bad("must not start with '#'"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// commands for customers

/// Quote for a POSIX shell when needed.
fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./_-".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn join_display(dir: &str, file: &str) -> String {
    if dir.is_empty() || dir == "." {
        file.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{file}")
    } else {
        format!("{dir}/{file}")
    }
}

/// The stock-OpenSSH command that checks the first signature over the manifest
/// in `dir_display` for `identity`, given an `allowed_signers` file in the
/// current directory (see [`allowed_signers_line`]).
pub fn verify_command(dir_display: &str, identity: &str) -> String {
    verify_command_for(dir_display, identity, SIGNATURE_FILE)
}

/// Like [`verify_command`], for the signature file `signature` (a countersignature).
pub fn verify_command_for(dir_display: &str, identity: &str, signature: &str) -> String {
    format!(
        "ssh-keygen -Y verify -f allowed_signers -I {} -n {NAMESPACE} -s {} < {}",
        sh_quote(identity),
        sh_quote(&join_display(dir_display, signature)),
        sh_quote(&join_display(dir_display, MANIFEST_FILE)),
    )
}

/// The coreutils command that checks every file digest listed in the manifest.
pub fn digest_check_command(dir_display: &str) -> String {
    let dir = if dir_display.is_empty() {
        "."
    } else {
        dir_display
    };
    format!("cd {} && sha256sum -c {MANIFEST_FILE}", sh_quote(dir))
}

// ---------------------------------------------------------------------------
// verification

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
}

#[derive(Debug, Clone, Serialize)]
pub struct SignatureCheck {
    pub file: String,
    /// Fingerprint of the embedded key, when the signature parses.
    pub fingerprint: Option<String>,
    /// Principals of the matching allowed_signers line.
    pub principal: Option<String>,
    pub status: SigStatus,
}

/// Everything [`verify_dir`] found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
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

impl VerifyReport {
    /// True only when the manifest parses, every listed file exists and
    /// matches, nothing stray looks like a signature, no signature is invalid
    /// and at least one is by a trusted key.
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
                    SigStatus::Invalid { .. } | SigStatus::Unsupported { .. }
                )
            })
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {}",
            self.dir.display(),
            if self.ok() {
                "verified"
            } else {
                "verification failed"
            }
        )?;
        writeln!(f, "trust: {}", self.trust)?;
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
            };
            write!(f, "signature {}: {status}", s.file)?;
            if let Some(fp) = &s.fingerprint {
                write!(f, " [{fp}]")?;
            }
            if let Some(p) = &s.principal {
                write!(f, " principal {p}")?;
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
            writeln!(f, "file {}: {status}", c.name)?;
        }
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

enum LoadedTrust {
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
                    if let Some(ns) = &s.namespaces {
                        if !match_pattern_list(NAMESPACE, ns) {
                            why = Some(format!(
                                "{}:{}: {} is not allowed to sign namespace {NAMESPACE} (namespaces=\"{ns}\")",
                                p.display(),
                                s.line,
                                s.principals
                            ));
                            continue;
                        }
                    }
                    if s.valid_after.is_some_and(|t| now < t)
                        || s.valid_before.is_some_and(|t| now > t)
                    {
                        why = Some(format!(
                            "{}:{}: key of {} is outside its validity period",
                            p.display(),
                            s.line,
                            s.principals
                        ));
                        continue;
                    }
                    return Ok(Some(s.principals.clone()));
                }
                Err(why.unwrap_or_else(|| format!("key is not in {}", p.display())))
            }
        }
    }
}

const SIG_BEGIN: &str = "-----BEGIN SSH SIGNATURE-----\n";
const SIG_END: &str = "-----END SSH SIGNATURE-----\n";
/// Base64 characters per line of an armored SSH signature (OpenSSH's sshsig.c).
const SIG_LINE_WIDTH: usize = 70;
/// Flag of a security key signature: the user touched the key.
const SK_USER_PRESENT: u8 = 0x01;

/// An armored signature as OpenSSH reads it: without the ASCII white space
/// around it, CRLF line breaks as LF, ending in one LF. Nothing else changes:
/// a lone carriage return or a space inside stays, and fails the form check.
fn normalize_armor(bytes: &[u8]) -> Vec<u8> {
    let trimmed = bytes.trim_ascii();
    let mut out = Vec::with_capacity(trimmed.len() + 1);
    let mut i = 0;
    while i < trimmed.len() {
        if trimmed[i] == b'\r' && trimmed.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(trimmed[i]);
        i += 1;
    }
    out.push(b'\n');
    out
}

/// Armor `raw` as `ssh-keygen -Y sign` does.
fn armor(raw: &[u8]) -> String {
    use base64ct::Encoding;
    let b64 = base64ct::Base64::encode_string(raw);
    let mut s = String::from(SIG_BEGIN);
    for line in b64.as_bytes().chunks(SIG_LINE_WIDTH) {
        s.push_str(std::str::from_utf8(line).unwrap_or_default());
        s.push('\n');
    }
    s.push_str(SIG_END);
    s
}

/// True when `text` (normalized) is exactly what OpenSSH writes for `sig`.
fn is_canonical_armor(sig: &SshSig, text: &[u8]) -> bool {
    if sig
        .to_pem(LineEnding::LF)
        .is_ok_and(|canon| canon.as_bytes() == text)
    {
        return true;
    }
    // ssh-key 0.6 re-encodes sk-ecdsa signatures with the flags and counter
    // inside the signature string, unlike OpenSSH; for those, encode as
    // OpenSSH does (sshsig.c, ssh-ecdsa-sk.c) and compare.
    if sig.algorithm() != Algorithm::SkEcdsaSha2NistP256 {
        return false;
    }
    sk_ecdsa_sshsig_bytes(sig).is_some_and(|raw| armor(&raw).as_bytes() == text)
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u32).to_be_bytes());
    out.extend(bytes);
}

/// The SSHSIG blob of an sk-ecdsa signature as OpenSSH encodes it.
fn sk_ecdsa_sshsig_bytes(sig: &SshSig) -> Option<Vec<u8>> {
    let data = sig.signature_bytes();
    let split = data.len().checked_sub(5)?;
    let mut inner = Vec::new();
    put_string(&mut inner, sig.algorithm().as_str().as_bytes());
    put_string(&mut inner, &data[..split]);
    inner.extend(&data[split..]);
    let key = PublicKey::from(sig.public_key().clone()).to_bytes().ok()?;
    let mut out = b"SSHSIG".to_vec();
    out.extend(sig.version().to_be_bytes());
    put_string(&mut out, &key);
    put_string(&mut out, sig.namespace().as_bytes());
    put_string(&mut out, sig.reserved());
    put_string(&mut out, sig.hash_alg().as_str().as_bytes());
    put_string(&mut out, &inner);
    Some(out)
}

fn is_security_key(algorithm: &Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::SkEd25519 | Algorithm::SkEcdsaSha2NistP256
    )
}

/// The flags byte of a security key signature (ssh-key keeps flags and
/// counter at the end of the signature bytes).
fn sk_flags(sig: &SshSig) -> u8 {
    let data = sig.signature_bytes();
    data.len()
        .checked_sub(5)
        .and_then(|i| data.get(i))
        .copied()
        .unwrap_or(0)
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

fn check_signature(path: &Path, manifest: Option<&[u8]>, trust: &LoadedTrust) -> SignatureCheck {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut check = SignatureCheck {
        file,
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
    let bytes = match crate::fsio::read::open(path, false)
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
                    lower(&e).to_lowercase()
                ),
            )
        }
        Err(e) => {
            return invalid(
                check,
                format!("not an ssh signature ({})", lower(&e).to_lowercase()),
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
fn inspect(dir: &Path, trust: &LoadedTrust) -> Result<(VerifyReport, Option<Vec<u8>>), SignError> {
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
    for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        let name = entry.file_name();
        match name.to_str() {
            Some(n) => entries.push(n.to_string()),
            None => r.problems.push(format!(
                "{}: file name is not utf-8",
                name.to_string_lossy()
            )),
        }
    }
    entries.sort();

    let manifest_bytes = match read_limited_in(dir, MANIFEST_FILE, MAX_MANIFEST_BYTES, "read") {
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
        for (name, expected) in &m.files {
            let status = match sha256_in(dir, name) {
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
        if r.files
            .iter()
            .any(|f| f.name == EVIDENCE_FILE && f.status == FileStatus::Ok)
        {
            match evidence_simulated(&dir.join(EVIDENCE_FILE)) {
                Ok(Some(b)) if b != m.simulated => r.problems.push(format!(
                    "{EVIDENCE_FILE}: says simulated: {b} but {MANIFEST_FILE} says simulated: {}",
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
                "{name}: unexpected signature-like file (signatures are named {SIGNATURE_FILE} or {MANIFEST_FILE}.N.sig)"
            ));
        } else if !listed_tops.contains(name.as_str()) {
            unlisted.push(name.clone());
        }
    }
    if !unlisted.is_empty() && r.manifest.is_some() {
        r.notes.push(format!(
            "not covered by the manifest (unsigned): {}",
            unlisted.join(", ")
        ));
    }
    sig_names.sort_by_key(|n| signature_index(n).unwrap_or(1));
    if let Some(last) = sig_names.last().and_then(|n| signature_index(n)) {
        for i in 1..last {
            let expected = signature_name(i);
            if !sig_names.contains(&expected) {
                r.problems.push(format!(
                    "{expected}: missing, but a later countersignature exists"
                ));
            }
        }
    }
    for name in &sig_names {
        let c = check_signature(&dir.join(name), manifest_bytes.as_deref(), trust);
        match &c.status {
            SigStatus::Invalid { reason } | SigStatus::Unsupported { reason } => {
                r.problems.push(format!("{name}: {reason}"))
            }
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
    let (mut r, _) = inspect(dir, &trust)?;
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

/// Sign the report in `dir` with the unencrypted OpenSSH private key file
/// `key` (Ed25519, ECDSA P-256/P-384 or RSA).
///
/// Writes the manifest (over [`DEFAULT_FILES`] present) if it is missing, then
/// checks that every digest matches and every existing signature is valid, and
/// writes [`SIGNATURE_FILE`], or, if that exists, the countersignature
/// `nodecert-manifest.txt.N.sig` with the smallest free N >= 2. Never modifies
/// an existing manifest or signature. Signing again with a key that already
/// signed is [`SignError::AlreadySigned`].
pub fn sign_dir(dir: &Path, key: &Path) -> Result<SignatureInfo, SignError> {
    let private = read_signing_key(key)?;
    let fingerprint = private.fingerprint(HashAlg::Sha256).to_string();
    let manifest_path = dir.join(MANIFEST_FILE);
    let mut manifest_written = false;
    if !manifest_path.exists() {
        if let Some(sig) = existing_signatures(dir)?.first() {
            return Err(SignError::Manifest {
                path: manifest_path,
                reason: format!("missing, but {sig} exists"),
            });
        }
        let present: Vec<&str> = DEFAULT_FILES
            .iter()
            .copied()
            .filter(|f| *f == EVIDENCE_FILE || dir.join(f).exists())
            .collect();
        write_manifest(dir, &present, &ManifestMeta::default())?;
        manifest_written = true;
    }
    let (report, manifest) = inspect(dir, &LoadedTrust::None)?;
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
    if let Some(s) = report
        .signatures
        .iter()
        .find(|s| s.fingerprint.as_deref() == Some(fingerprint.as_str()))
    {
        return Err(SignError::AlreadySigned {
            path: dir.join(&s.file),
            fingerprint,
        });
    }
    let sig = sign_manifest(&private, &manifest).map_err(|e| SignError::Signing {
        path: key.to_path_buf(),
        reason: lower(&e).to_lowercase(),
    })?;
    private
        .public_key()
        .verify(NAMESPACE, &manifest, &sig)
        .map_err(|e| SignError::Signing {
            path: key.to_path_buf(),
            reason: format!("self-check failed: {}", lower(&e).to_lowercase()),
        })?;
    let pem = sig.to_pem(LineEnding::LF).map_err(|e| SignError::Signing {
        path: key.to_path_buf(),
        reason: lower(&e).to_lowercase(),
    })?;
    let mut index = 1;
    loop {
        let path = dir.join(signature_name(index));
        match write_new_in_report(&path, pem.as_bytes(), 0o644) {
            Ok(()) => {
                return Ok(SignatureInfo {
                    manifest: manifest_path,
                    manifest_written,
                    signature: path,
                    countersignature: index > 1,
                    fingerprint,
                })
            }
            Err(SignError::Exists(_)) if index < 10_000 => index += 1,
            Err(e) => return Err(e),
        }
    }
}

/// An SSHSIG over `manifest` in [`NAMESPACE`], SHA-512 message hash.
fn sign_manifest(key: &PrivateKey, manifest: &[u8]) -> Result<SshSig, ssh_key::Error> {
    match key.key_data().rsa() {
        Some(rsa_key) => sign_rsa(rsa_key, key.public_key().key_data(), manifest),
        None => key.sign(NAMESPACE, HashAlg::Sha512, manifest),
    }
}

/// RSA signing with rsa-sha2-512, as `ssh-keygen -Y sign` does. ssh-key 0.6.7
/// cannot do it itself: it builds the private key from p twice instead of p
/// and q, so the rsa crate rejects it.
fn sign_rsa(
    key: &ssh_key::private::RsaKeypair,
    public: &ssh_key::public::KeyData,
    manifest: &[u8],
) -> Result<SshSig, ssh_key::Error> {
    use rsa::signature::{SignatureEncoding, Signer};
    let uint = |m: &ssh_key::Mpint| rsa::BigUint::try_from(m);
    let private = rsa::RsaPrivateKey::from_components(
        uint(&key.public.n)?,
        uint(&key.public.e)?,
        uint(&key.private.d)?,
        vec![uint(&key.private.p)?, uint(&key.private.q)?],
    )
    .map_err(|_| ssh_key::Error::Crypto)?;
    let signed = SshSig::signed_data(NAMESPACE, HashAlg::Sha512, manifest)?;
    let signature = rsa::pkcs1v15::SigningKey::<sha2::Sha512>::new(private)
        .try_sign(&signed)
        .map_err(|_| ssh_key::Error::Crypto)?;
    let signature = ssh_key::Signature::new(
        Algorithm::Rsa {
            hash: Some(HashAlg::Sha512),
        },
        signature.to_vec(),
    )?;
    SshSig::new(public.clone(), NAMESPACE, HashAlg::Sha512, signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(match_pattern_list("nodecert", "nodecert"));
        assert!(match_pattern_list("nodecert", "git,node*"));
        assert!(!match_pattern_list("nodecert", "git,file"));
        assert!(!match_pattern_list("nodecert", "*,!nodecert"));
        assert!(match_pattern_list("nodecert", "n?decert"));
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

    fn sample(simulated: bool) -> Manifest {
        let h = "ab".repeat(32);
        Manifest {
            format: MANIFEST_FORMAT.into(),
            nodecert_version: "0.1.0".into(),
            evidence_sha256: h.clone(),
            simulated,
            files: vec![
                (EVIDENCE_FILE.into(), h),
                ("report.md".into(), "cd".repeat(32)),
            ],
        }
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

    #[test]
    fn allowed_signers_options() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("allowed_signers");
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKfQ5+ClaHsvpT2R5bhvRkxx5SpUiT+xTeKyRuPnH4mS";
        fs::write(
            &p,
            format!(
                "# comment\n\nalice@example.com {key} a comment\n\"bob@x,carol@y\" namespaces=\"git,nodecert\",valid-after=\"20200101\" {key}\n"
            ),
        )
        .unwrap();
        let s = parse_allowed_signers(&p).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].principals, "alice@example.com");
        assert_eq!(s[1].principals, "bob@x,carol@y");
        assert_eq!(s[1].namespaces.as_deref(), Some("git,nodecert"));
        assert!(s[1].valid_after.is_some());
        fs::write(&p, format!("alice bogus-option {key}\n")).unwrap();
        assert!(matches!(
            parse_allowed_signers(&p),
            Err(SignError::AllowedSigners { line: 1, .. })
        ));
    }

    #[test]
    fn commands_are_quoted() {
        assert_eq!(
            verify_command("out/run 1", "ops@example.com"),
            "ssh-keygen -Y verify -f allowed_signers -I ops@example.com -n nodecert -s 'out/run 1/nodecert-manifest.txt.sig' < 'out/run 1/nodecert-manifest.txt'"
        );
        assert_eq!(
            digest_check_command("r"),
            "cd r && sha256sum -c nodecert-manifest.txt"
        );
    }

    #[test]
    fn patterns_match_in_bounded_time_and_without_recursion() {
        for (s, p, want) in [
            ("alice@example.com", "*@example.com", true),
            ("alice@example.com", "a?ice@*", true),
            ("alice@example.com", "*@example.org", false),
            ("", "*", true),
            ("", "?", false),
            ("abc", "abc*", true),
            ("abc", "a*c*d", false),
            ("aXbYc", "a*b*c", true),
        ] {
            assert_eq!(match_pattern(s, p), want, "{s} {p}");
        }
        let start = std::time::Instant::now();
        let many = "*".repeat(1_000_000);
        assert!(match_pattern("alice", &many));
        let s = "a".repeat(100);
        let p = format!("{}b", "*".repeat(80));
        assert!(!match_pattern(&s, &p));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }
}
