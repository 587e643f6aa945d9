//! `nodecert verify`: every signature and every digest of a report folder.

use super::signer::sign_error;
use crate::error::{exit, InputError, Result};
use crate::sign;
use std::path::{Path, PathBuf};

/// What `verify` must find besides good signatures (`--require-pass`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Require {
    /// What the signatures seal must be a pass.
    pub pass: bool,
    /// A pass of a simulated node counts.
    pub allow_simulated: bool,
}

/// What a verified folder's signatures seal: its verdict as this nodecert judges it, the exit
/// code of that verdict, and whether its results are simulated.
struct Sealed {
    verdict: String,
    code: u8,
    simulated: bool,
}

/// The exit code under `require` of a folder whose signatures verified and seal `sealed`
/// (`Err`: what it seals could not be read back as the bytes verified), saying why on stderr
/// where it is not 0.
fn required(require: Require, sealed: std::result::Result<Sealed, String>) -> u8 {
    if !require.pass {
        return exit::PASS;
    }
    let s = match sealed {
        Ok(s) => s,
        Err(why) => {
            crate::errln!(
                "error: --require-pass: cannot say what the signatures seal: {}",
                crate::console::visible(&why)
            );
            return exit::VERIFY_FAILED;
        }
    };
    if s.simulated && !require.allow_simulated {
        crate::errln!(
            "error: --require-pass: the results are simulated, not a certification of real \
             hardware (--allow-simulated lets a rehearsal through)"
        );
        return exit::INVALID_INPUT;
    }
    if s.code != exit::PASS {
        crate::errln!(
            "error: --require-pass: the signatures seal {}, not a pass",
            crate::console::visible(&s.verdict)
        );
    }
    s.code
}

pub fn cmd_verify(
    dir: &Path,
    allowed: Option<PathBuf>,
    pubkey: Option<PathBuf>,
    require: Require,
) -> Result<u8> {
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
        let mut sealed = Err("the manifest names neither a node's nor a fleet's report".into());
        if let Some(m) = r
            .manifest
            .as_ref()
            .filter(|m| m.kind == sign::ReportKind::Node)
        {
            let (lines, s) = certifies(dir, &m.evidence_sha256);
            for line in lines {
                crate::outln!("{}", crate::console::visible(&line));
            }
            sealed = s;
        }
        // A fleet's signature seals what its report read, not each node's certificate: say
        // which node certificates were verified when it was made.
        if r.manifest
            .as_ref()
            .is_some_and(|m| m.kind == sign::ReportKind::Fleet)
        {
            match crate::fleet::FleetReport::read(dir) {
                Ok(f) => {
                    crate::outln!("{}", crate::console::visible(&f.signature_scope()));
                    sealed = Ok(Sealed {
                        verdict: f.verdict.label().to_string(),
                        code: f.verdict.exit_code(),
                        simulated: f.simulated,
                    });
                }
                Err(e) => {
                    crate::outln!(
                        "(cannot say which node certificates the fleet report verified: {})",
                        crate::console::visible(&e)
                    );
                    sealed = Err(e.to_string());
                }
            }
        }
        return Ok(required(require, sealed));
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
fn certifies(dir: &Path, sealed: &str) -> (Vec<String>, std::result::Result<Sealed, String>) {
    use sha2::Digest;
    let path = crate::evidence::Evidence::path_in(dir);
    // The file itself, never a link at its name, as the rest of verify reads the folder.
    let read = crate::fsio::read::read_to_string_no_link(&path, crate::fsio::read::Kind::Evidence)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
        .and_then(|text| Ok((crate::evidence::Evidence::from_text(&path, &text)?, text)));
    let (ev, text) = match read {
        Ok(x) if hex::encode(sha2::Sha256::digest(x.1.as_bytes())) == sealed => x,
        Ok(_) => {
            let why = "evidence.json changed since it was verified".to_string();
            return (vec![format!("certifies: not said: {why}")], Err(why));
        }
        Err(e) => return (vec![format!("certifies: not said: {e}")], Err(e)),
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
    let sealed = Sealed {
        verdict: ev.verdict.label().to_string(),
        code: ev.verdict.exit_code(),
        simulated: ev.simulated,
    };
    (out, Ok(sealed))
}
