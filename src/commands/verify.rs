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
        // What the signatures vouch for, from the evidence bytes they name: a certificate that
        // verifies is not a pass, and one copied from another node verifies as well.
        if let Some(m) = r
            .manifest
            .as_ref()
            .filter(|m| m.kind == sign::ReportKind::Node)
        {
            for line in certifies(dir, &m.evidence_sha256) {
                crate::outln!("{}", crate::console::visible(&line));
            }
        }
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

/// What a verified node folder certifies, read from its evidence when that is still the bytes
/// the manifest names: the node (host, GPUs and their serials), the verdict its records give as
/// this nodecert judges them (and the one the file states, where another), what it was signed as,
/// and when it finished.
fn certifies(dir: &Path, sealed: &str) -> Vec<String> {
    use sha2::Digest;
    let path = crate::evidence::Evidence::path_in(dir);
    // The file itself, never a link at its name, as the rest of verify reads the folder.
    let read = crate::fsio::read::read_to_string_no_link(&path, crate::fsio::read::Kind::Evidence)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
        .and_then(|text| Ok((crate::evidence::Evidence::from_text(&path, &text)?, text)));
    let (ev, text) = match read {
        Ok(x) if hex::encode(sha2::Sha256::digest(x.1.as_bytes())) == sealed => x,
        Ok(_) => {
            return vec!["certifies: not said: evidence.json changed since it was verified".into()]
        }
        Err(e) => return vec![format!("certifies: not said: {e}")],
    };
    let n = &ev.node;
    let serials: Vec<&str> = n
        .gpus
        .iter()
        .map(|g| g.serial.as_deref().unwrap_or("(not read)"))
        .collect();
    let mut out = vec![format!(
        "node: {} ({}); GPU serials: {}",
        n.hostname,
        n.summary(),
        if serials.is_empty() {
            "none".into()
        } else {
            serials.join(", ")
        }
    )];
    let stated = crate::evidence::stated_verdict_in(&path, &text)
        .ok()
        .flatten();
    let mut verdict = format!(
        "verdict: {}{}",
        ev.verdict.label(),
        if ev.simulated { " (SIMULATED)" } else { "" }
    );
    if let Some(s) = stated.filter(|s| *s != ev.verdict) {
        verdict.push_str(&format!(
            " as this nodecert judges its records (evidence.json states {})",
            s.label()
        ));
    }
    if let Some(why) = ev.shortfall_text() {
        verdict.push_str(&format!("; {why}"));
    }
    out.push(verdict);
    out.push(match ev.finished_at {
        Some(t) => format!("finished: {}", t.to_rfc3339()),
        None => "finished: never (the run did not finish)".into(),
    });
    out
}
