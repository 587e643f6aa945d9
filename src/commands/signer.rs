//! A signing key as commands use it: checked before any work, the reports' signing facts, the
//! text that tells how to verify; and how signing errors map to exit codes.

use crate::error::{Error, InputError, Result};
use crate::evidence::Evidence;
use crate::sign;
use std::path::{Path, PathBuf};

/// Signer identity when neither --signer-id nor a usable key comment gives one.
pub const DEFAULT_SIGNER: &str = "nodecert-signer";

/// A signing key, checked before any work is done, and the identity it signs as.
pub struct Signer {
    key: PathBuf,
    fingerprint: String,
    identity: String,
}

impl Signer {
    pub fn open(key: &Path, identity: Option<String>) -> Result<Signer> {
        let (fingerprint, comment) = sign::signing_key_info(key).map_err(sign_error)?;
        let identity = match identity {
            Some(id) if !sign::is_valid_identity(&id) => {
                return Err(InputError::Other(format!(
                    "--signer-id {id:?}: must be non-empty, without white space, quotes, commas or * ? !"
                ))
                .into())
            }
            Some(id) => id,
            None if sign::is_valid_identity(&comment) => comment,
            None => DEFAULT_SIGNER.to_string(),
        };
        Ok(Signer {
            key: key.to_path_buf(),
            fingerprint,
            identity,
        })
    }

    /// The private key's path.
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// What the reports of the folder `out` say about the signature to come, its evidence file
    /// having the SHA-256 `digest`: key, evidence digest, verify command, and what a run that
    /// did not keep its promise is signed as.
    pub fn signing_of(
        &self,
        out: &Path,
        digest: String,
        signed_as: Option<String>,
    ) -> crate::report::Signing {
        crate::report::Signing {
            fingerprint: Some(self.fingerprint.clone()),
            evidence_sha256: Some(digest),
            verify_command: Some(sign::verify_command(
                &out.display().to_string(),
                &self.identity,
            )),
            signed_as,
        }
    }

    /// Sign the report folder this command holds, writing through its handle, if its evidence
    /// file is still `checked` (the SHA-256 of the bytes the command judged signable).
    pub fn sign(
        &self,
        dir: &crate::fsio::write::Dir,
        checked: &str,
    ) -> Result<sign::SignatureInfo> {
        sign::sign_dir_in(dir, &self.key, Some(checked)).map_err(sign_error)
    }

    /// What was signed, and how anyone can check it.
    pub fn signed_text(&self, dir: &Path, info: &sign::SignatureInfo, simulated: bool) -> String {
        let d = dir.display().to_string();
        let sig = info
            .signature
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let mut s = format!(
            "{} {d} as {} ({}): {}{}\n",
            if info.countersignature {
                "countersigned"
            } else {
                "signed"
            },
            self.identity,
            self.fingerprint,
            info.signature.display(),
            crate::console::simulated_tag(simulated)
        );
        if simulated {
            s.push_str("SIMULATED RESULTS: the signature seals simulated figures; not a certification of real hardware\n");
        }
        match sign::allowed_signers_line(&self.key, &self.identity) {
            Ok(line) => s.push_str(&format!(
                "allowed_signers line (give it to whoever verifies):\n  {line}\n\
                 verify with nodecert (line saved in a file named allowed_signers):\n  \
                 nodecert verify {d} --allowed-signers allowed_signers\n\
                 or with OpenSSH and coreutils only:\n  {}\n  {}\n",
                sign::verify_command_for(&d, &self.identity, &sig),
                sign::digest_check_command(&d)
            )),
            Err(e) => s.push_str(&format!("cannot print the allowed_signers line: {e}\n")),
        }
        s
    }
}

/// Errors of signing: unreadable inputs are invalid input, broken reports fail verification,
/// failed writes mean the node's run could not be completed.
pub(crate) fn sign_error(e: sign::SignError) -> Error {
    use sign::SignError as S;
    match e {
        S::Io {
            action,
            path,
            source,
        } if !(action.starts_with("read") || action == "list")
            && source.kind() != std::io::ErrorKind::InvalidInput =>
        {
            Error::Write { path, source }
        }
        S::NotSignable { .. } | S::Manifest { .. } | S::Evidence { .. } => {
            Error::Verify(e.to_string())
        }
        e => Error::Input(InputError::Other(e.to_string())),
    }
}

/// What the title of a run that did not keep its promise says once signed anyway: "signed as
/// incomplete", "signed as nothing judged".
pub fn signed_as(ev: &Evidence) -> Option<String> {
    ev.shortfall().map(|v| format!("signed as {}", v.words()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    /// A command's signature is held to the evidence it judged: another digest is refused
    /// (exit 4, nothing signed), the digest of the file as it is signs.
    #[test]
    fn a_signature_is_held_to_the_digest_the_command_judged() {
        let keys = tempfile::tempdir().unwrap();
        let key = keys.path().join("k");
        sign::keygen(&key, "ops@test").unwrap();
        let signer = Signer::open(&key, None).unwrap();
        let d = tempfile::tempdir().unwrap();
        let text = "{\"simulated\": false}\n";
        std::fs::write(d.path().join(sign::EVIDENCE_FILE), text).unwrap();
        let dir = crate::fsio::write::Dir::open(d.path()).unwrap();
        let e = signer.sign(&dir, &"0".repeat(64)).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::exit::VERIFY_FAILED, "{e}");
        assert!(
            e.to_string().contains("changed while it was being signed"),
            "{e}"
        );
        assert!(!d.path().join(sign::MANIFEST_FILE).exists());
        let good = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let info = signer.sign(&dir, &good).unwrap();
        assert!(info.signature.exists());
    }
}
