//! `nodecert keygen`: an Ed25519 signing key and its allowed_signers line.

use super::signer::{sign_error, DEFAULT_SIGNER};
use crate::error::{exit, Result};
use crate::sign;
use std::path::Path;

pub fn cmd_keygen(out: &Path, comment: &str) -> Result<u8> {
    let info = sign::keygen(out, comment).map_err(sign_error)?;
    let identity = if sign::is_valid_identity(comment) {
        comment
    } else {
        DEFAULT_SIGNER
    };
    let line = sign::allowed_signers_line(&info.public_key, identity).map_err(sign_error)?;
    crate::outln!(
        "wrote {} (private key, mode 0600; keep it secret) and {}",
        info.private_key.display(),
        info.public_key.display()
    );
    crate::outln!("fingerprint: {}", info.fingerprint);
    crate::outln!("allowed_signers line:\n  {line}");
    crate::outln!(
        "sign a run with: nodecert run ... --sign-key {}",
        info.private_key.display()
    );
    Ok(exit::PASS)
}
