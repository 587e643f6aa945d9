//! `nodecert verify`: every signature and every digest of a report folder.

use super::signer::sign_error;
use crate::error::{exit, InputError, Result};
use crate::sign;
use std::path::{Path, PathBuf};

pub fn cmd_verify(dir: &Path, allowed: Option<PathBuf>, pubkey: Option<PathBuf>) -> Result<u8> {
    if !dir.is_dir() {
        return Err(InputError::Other(format!("{}: not a report folder", dir.display())).into());
    }
    let trust = match (allowed, pubkey) {
        (Some(f), _) => sign::Trust::AllowedSigners(f),
        (None, Some(k)) => sign::Trust::PublicKey(k),
        (None, None) => sign::Trust::Untrusted,
    };
    let untrusted = matches!(trust, sign::Trust::Untrusted);
    let r = sign::verify_dir(dir, &trust).map_err(sign_error)?;
    crate::out!("{r}");
    let sim = if r.simulated == Some(true) {
        " (SIMULATED RESULTS: not a certification of real hardware)"
    } else {
        ""
    };
    if r.ok() {
        crate::outln!("VERIFIED{sim}");
        // A fleet's signature seals what its report read, not each node's certificate: say
        // which node certificates were verified when it was made.
        if r.manifest
            .as_ref()
            .is_some_and(|m| m.kind == sign::ReportKind::Fleet)
        {
            match crate::fleet::FleetReport::read(dir) {
                Ok(f) => crate::outln!("{}", crate::console::visible(&f.signature_scope())),
                Err(e) => crate::outln!(
                    "(cannot say which node certificates the fleet report verified: {})",
                    crate::console::visible(&e)
                ),
            }
        }
        return Ok(exit::PASS);
    }
    crate::outln!("NOT VERIFIED{sim}");
    let why = if r.problems.is_empty() {
        "see above".to_string()
    } else {
        r.problems.join("; ")
    };
    crate::errln!(
        "error: verification failed: {}",
        crate::console::visible(&why)
    );
    if untrusted {
        crate::errln!("hint: say whom you trust with --allowed-signers FILE or --pubkey KEY.pub");
    }
    Ok(exit::VERIFY_FAILED)
}
