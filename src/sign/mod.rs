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
//! the folder's evidence file, which must be listed) and `simulated` (`true` or `false`)
//! are required, once each; unknown keys are ignored. The optional key `kind`
//! says what the folder reports on ([`ReportKind`]): `node` (the default, and
//! never written, so a node's manifest reads as it always has; its evidence
//! file is `evidence.json`) or `fleet` (a `nodecert fleet report` folder; its
//! evidence file is `fleet.json`). Any other kind is refused. When `simulated` is
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
//! # Keys
//!
//! Signing takes an unencrypted OpenSSH private key that only its owner can
//! read: like `ssh-keygen -Y sign` ("UNPROTECTED PRIVATE KEY FILE"), nodecert
//! refuses a key file that group or others may read or write. A PEM private
//! key (`RSA PRIVATE KEY`, `EC PRIVATE KEY`, `PRIVATE KEY`) is named as such,
//! with the command that converts it (`ssh-keygen -p -f KEY`).
//!
//! # Signatures and countersignatures
//!
//! The first signature is `nodecert-manifest.txt.sig`, as `ssh-keygen -Y sign`
//! names it. A second party countersigns the same manifest bytes into
//! `nodecert-manifest.txt.2.sig`, then `.3.sig`, ...; a countersignature never
//! rewrites the manifest or another signature. Signing twice with the same key
//! is an error ([`SignError::AlreadySigned`]): one key is one party, and a
//! second signature by a key that already signed (a copied `.sig`) is
//! [`SigStatus::Duplicate`] and fails verification. Before signing, [`sign_dir`]
//! checks that every digest matches and every existing signature is valid, so
//! nobody signs a report that has already been altered.
//!
//! # Verification
//!
//! [`verify_dir`] reports every file digest and every signature;
//! [`VerifyReport::ok`] holds only when the manifest parses, every listed file
//! exists and matches, no stray signature-like file lies in the directory, no
//! signature is invalid or a duplicate, and at least one signature is by a trusted key
//! ([`Trust::Untrusted`] therefore never verifies). Signature files must be in
//! the exact form OpenSSH writes (PEM, 70-column base64), so any changed byte
//! makes a signature invalid; as with OpenSSH, `\r\n` line breaks (a file
//! converted for Windows or sent by mail) and white space around the armor
//! are accepted. A security key signature must carry the user-presence flag.
//! A signature nodecert cannot check (another key type) is
//! [`SigStatus::Unsupported`] and, like an invalid one, fails verification.
//! Files in the directory that the manifest does not list are mentioned as
//! notes but are not failures.

mod allowed_signers;
mod armor;
mod commands;
mod keys;
mod manifest;
pub(crate) use manifest::is_hex64;
mod short_scalar;
mod signing;
mod verify;

pub use allowed_signers::{allowed_signers_line, allowed_signers_line_for, is_valid_identity};
pub use commands::{digest_check_command, verify_command, verify_command_for};
pub use keys::{key_fingerprint, keygen, signing_key_info, KeyInfo};
pub use manifest::{sha256_in, Manifest};

/// The signature files of a folder a command holds open (`nodecert-manifest.txt.sig`, then the
/// countersignatures by number), listed through its handle: none means it was never signed,
/// whatever manifest is there.
pub fn signatures_in_folder(folder: &crate::fsio::write::Dir) -> Result<Vec<String>, SignError> {
    let root = read_root(folder)?;
    manifest::existing_signatures(Place::new(&root, folder.path()))
}

/// [`crate::fsio::write::Dir::read_root`] of a folder being signed.
fn read_root(folder: &crate::fsio::write::Dir) -> Result<PathBuf, SignError> {
    folder.read_root().map_err(io_err("read", folder.path()))
}

/// A report folder as it is read and as messages name it. A command that holds the folder open
/// (to sign it) reads it through its handle (`read`: [`crate::fsio::write::Dir::read_root`]),
/// so that what it reads is what it writes beside whatever the folder's path names meanwhile;
/// messages still name the path the user gave (`shown`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    read: &'a Path,
    shown: &'a Path,
}

impl<'a> Place<'a> {
    pub(crate) fn new(read: &'a Path, shown: &'a Path) -> Place<'a> {
        Place { read, shown }
    }

    /// A folder read by the path messages name.
    pub(crate) fn at(dir: &'a Path) -> Place<'a> {
        Place::new(dir, dir)
    }

    /// `rel` of the folder, to read.
    fn read(&self, rel: &str) -> PathBuf {
        self.read.join(rel)
    }

    /// `rel` of the folder, as messages name it.
    fn shown(&self, rel: &str) -> PathBuf {
        self.shown.join(rel)
    }
}
pub use signing::{
    sign_dir, sign_dir_in, write_manifest, write_manifest_in, ManifestMeta, SignatureInfo,
};
pub use verify::{
    verify_dir, FileCheck, FileStatus, SigStatus, SignatureCheck, Trust, VerifyReport,
};

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

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
/// The files [`sign_dir`] lists when it writes the manifest of a node's folder itself (those
/// present; `evidence.json` is required).
pub const DEFAULT_FILES: [&str; 3] = [EVIDENCE_FILE, "report.html", "report.md"];

/// What a signed folder reports on, and so which file is its evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// One node's run: `evidence.json` and its pages.
    Node,
    /// A fleet's report (`nodecert fleet report`): `fleet.json` and its pages.
    Fleet,
}

impl ReportKind {
    /// The evidence file: its digest is the manifest's `evidence-sha256`, its `simulated` flag
    /// must agree with the manifest's.
    pub const fn evidence_file(self) -> &'static str {
        match self {
            ReportKind::Node => EVIDENCE_FILE,
            ReportKind::Fleet => crate::fleet::FLEET_FILE,
        }
    }

    /// The most bytes the files a manifest of this kind lists are read, together, to sign or
    /// verify them: what such a folder holds with room to spare (a node's evidence is at most
    /// 64 MiB and its pages a few times less; a fleet's `fleet.json` at most 1 GiB).
    pub const fn read_budget(self) -> u64 {
        const MIB: u64 = 1024 * 1024;
        match self {
            ReportKind::Node => 512 * MIB,
            ReportKind::Fleet => 8 * 1024 * MIB,
        }
    }

    /// The manifest's `kind` value.
    pub const fn key(self) -> &'static str {
        match self {
            ReportKind::Node => "node",
            ReportKind::Fleet => "fleet",
        }
    }

    /// The files [`sign_dir`] lists when it writes the manifest itself (those present; the
    /// evidence file is required).
    pub const fn default_files(self) -> &'static [&'static str] {
        match self {
            ReportKind::Node => &DEFAULT_FILES,
            ReportKind::Fleet => &crate::fleet::FILES,
        }
    }

    /// The kind of the folder `dir`: a fleet's where it holds `fleet.json` and no
    /// `evidence.json`, a node's otherwise (so a folder with neither is told that its
    /// `evidence.json` is missing). Names are looked at, links there not followed, as the
    /// signature reads them.
    pub fn of_folder(dir: &Path) -> ReportKind {
        let here = |name: &str| dir.join(name).symlink_metadata().is_ok();
        ReportKind::of_presence(here(EVIDENCE_FILE), here(crate::fleet::FLEET_FILE))
    }

    /// [`ReportKind::of_folder`] of a folder that holds `evidence.json` or not (`evidence`),
    /// and `fleet.json` or not (`fleet`).
    pub(crate) fn of_presence(evidence: bool, fleet: bool) -> ReportKind {
        if !evidence && fleet {
            ReportKind::Fleet
        } else {
            ReportKind::Node
        }
    }

    /// The kind whose evidence file is among `files`; `Err` when both are, or neither.
    pub(crate) fn of_files<'a>(
        files: impl IntoIterator<Item = &'a str>,
    ) -> Result<ReportKind, String> {
        let (mut node, mut fleet) = (false, false);
        for f in files {
            node |= f == ReportKind::Node.evidence_file();
            fleet |= f == ReportKind::Fleet.evidence_file();
        }
        match (node, fleet) {
            (true, false) => Ok(ReportKind::Node),
            (false, true) => Ok(ReportKind::Fleet),
            (true, true) => Err(format!(
                "lists both {} and {}: a folder is one node's report or one fleet's",
                ReportKind::Node.evidence_file(),
                ReportKind::Fleet.evidence_file()
            )),
            (false, false) => Err(format!(
                "{} (or, for a fleet, {}) is not listed",
                ReportKind::Node.evidence_file(),
                ReportKind::Fleet.evidence_file()
            )),
        }
    }
}
/// The line a manifest of simulated results carries.
pub const SIMULATED_WARNING: &str =
    "# WARNING: SIMULATED RESULTS. These files come from nodecert's \
simulator: they are not a certification of real hardware.";

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

use crate::error::lower;

/// The whole message in lower case (library messages name algorithms and formats in capitals).
fn lowercase(e: &dyn fmt::Display) -> String {
    e.to_string().to_lowercase()
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SignError + 'a {
    move |source| SignError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// A regular file of at most `limit` bytes (a FIFO or a device is refused, never read).
fn read_limited(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, SignError> {
    crate::fsio::read::open(path, true)
        .and_then(|f| crate::fsio::read::read_limited(f, limit, "this file"))
        .map_err(io_err(what, path))
}

/// `read_limited` for the file `rel` of a report folder: no symbolic link below it is followed.
fn read_limited_in(
    dir: Place,
    rel: &str,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, SignError> {
    let path = dir.shown(rel);
    crate::fsio::read::open_in(dir.read, rel)
        .and_then(|f| crate::fsio::read::read_limited(f, limit, "this file"))
        .map_err(io_err(what, &path))
}

fn map_new<T>(path: &Path, r: io::Result<T>) -> Result<T, SignError> {
    r.map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            SignError::Exists(path.to_path_buf())
        } else {
            io_err("create", path)(e)
        }
    })
}
