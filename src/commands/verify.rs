//! `nodecert verify`: every signature and every digest of a report folder.

use super::signer::sign_error;
use crate::error::{exit, InputError, Result};
use crate::sign;
use std::path::Path;

/// What `verify` must find besides good signatures (`--require-pass`).
#[derive(Debug, Clone, Default)]
pub struct Require {
    /// What the signatures seal must be a pass.
    pub pass: bool,
    /// A pass of a simulated node counts.
    pub allow_simulated: bool,
    /// The host whose certificate it must be (a node's).
    pub host: Option<String>,
    /// The suite it must have been run with, by name.
    pub suite: Option<String>,
    /// The suite it must have been run with, by the SHA-256 of its file.
    pub suite_sha256: Option<String>,
}

/// What a verified folder's signatures seal: its verdict as this nodecert judges it, the exit
/// code of that verdict, whether its results are simulated, and what it is of.
struct Sealed {
    verdict: String,
    code: u8,
    simulated: bool,
    /// The node's host name; None for a fleet.
    host: Option<String>,
    /// The suite run, by name, where known.
    suite: Option<String>,
    /// Where the suite came from: `embedded:NAME`, or its file (a node's; None for a fleet).
    suite_origin: Option<String>,
    /// The SHA-256 of the suite's file, where known.
    suite_sha256: Option<String>,
    /// A fleet's nodes that passed but were flagged as slower than their siblings.
    flagged: usize,
}

/// Why what the signatures seal cannot be said: the exit code that says it (4: the sealed file
/// changed since it was verified; 2: its bytes are the sealed ones, but this nodecert cannot
/// read them), and the reason.
pub(crate) struct Unsaid {
    pub(crate) code: u8,
    pub(crate) why: String,
}

/// The exit code under `require` of a folder whose signatures verified and seal `sealed`,
/// saying why on stderr where it is not 0.
fn required(require: &Require, sealed: std::result::Result<Sealed, Unsaid>) -> u8 {
    if !require.pass {
        return exit::PASS;
    }
    let s = match sealed {
        Ok(s) => s,
        Err(u) => {
            crate::errln!(
                "error: --require-pass: cannot say what the signatures seal: {}",
                crate::console::visible(&u.why)
            );
            return u.code;
        }
    };
    if s.simulated && !require.allow_simulated {
        crate::errln!(
            "error: --require-pass: the results are simulated, not a certification of real \
             hardware (--allow-simulated lets a rehearsal through)"
        );
        return exit::INVALID_INPUT;
    }
    let show = |v: &Option<String>| match v {
        Some(x) => crate::console::visible(x),
        None => "(not said)".to_string(),
    };
    if let Some(want) = &require.host {
        if s.host.is_none() {
            crate::errln!(
                "error: --require-pass: --host names a node, and this is a fleet's report"
            );
            return exit::INVALID_INPUT;
        }
        if !s.host.as_deref().is_some_and(|h| same_host(h, want)) {
            crate::errln!(
                "error: --require-pass: the certificate is of host {}, not {}",
                show(&s.host),
                crate::console::visible(want)
            );
            return exit::INVALID_INPUT;
        }
    }
    if let Some(want) = &require.suite {
        if s.suite.as_ref() != Some(want) {
            crate::errln!(
                "error: --require-pass: the certificate is of suite {}, not {}",
                show(&s.suite),
                crate::console::visible(want)
            );
            return exit::INVALID_INPUT;
        }
        // A name is a field of the suite's file: one of the embedded suites' names must be that
        // embedded suite, not a file that took its name.
        let embedded = format!("embedded:{want}");
        if crate::suite::load::embedded(want).is_some()
            && s.suite_origin.as_ref().is_some_and(|o| *o != embedded)
        {
            crate::errln!(
                "error: --require-pass: the certificate's suite is named {} but was read from {}, \
                 not the embedded suite of that name (--suite-sha256 names a file's)",
                crate::console::visible(want),
                show(&s.suite_origin)
            );
            return exit::INVALID_INPUT;
        }
    }
    if let Some(want) = &require.suite_sha256 {
        if s.suite_sha256.as_ref() != Some(want) {
            crate::errln!(
                "error: --require-pass: the certificate's suite has SHA-256 {}, not {}",
                show(&s.suite_sha256),
                crate::console::visible(want)
            );
            return exit::INVALID_INPUT;
        }
    }
    if s.code != exit::PASS {
        crate::errln!(
            "error: --require-pass: the signatures seal {}, not a pass",
            crate::console::visible(&s.verdict)
        );
    } else if s.flagged > 0 {
        crate::errln!(
            "note: --require-pass: every node passed, and {} {} flagged as slower than {} \
             siblings (within {} floors)",
            s.flagged,
            if s.flagged == 1 { "was" } else { "were" },
            if s.flagged == 1 { "its" } else { "their" },
            if s.flagged == 1 { "its" } else { "their" },
        );
    }
    s.code
}

/// Whether the host names `a` and `b` name one host as DNS compares names: letters in either
/// case, and a trailing dot (the root) or not. A short name is not its FQDN: `node1` could be
/// `node1.rack1` or `node1.rack2`, and a gate must not choose.
fn same_host(a: &str, b: &str) -> bool {
    let a = a.strip_suffix('.').unwrap_or(a);
    let b = b.strip_suffix('.').unwrap_or(b);
    !a.is_empty() && a.eq_ignore_ascii_case(b)
}

/// The text of the file at `path` that a verified folder's signatures seal (`sealed`: its
/// digest): the file itself, never a link at its name, as the rest of verify reads the folder.
/// Bytes other than the sealed ones are a signature's matter (4); the caller parses them after,
/// and sealed bytes it cannot read are an input's (2).
fn sealed_text(
    path: &Path,
    kind: crate::fsio::read::Kind,
    sealed: &str,
) -> std::result::Result<String, Unsaid> {
    use sha2::Digest;
    let text = crate::fsio::read::read_to_string_no_link(path, kind).map_err(|e| Unsaid {
        code: exit::VERIFY_FAILED,
        why: format!("cannot read {}: {e}", path.display()),
    })?;
    if hex::encode(sha2::Sha256::digest(text.as_bytes())) != sealed {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        return Err(Unsaid {
            code: exit::VERIFY_FAILED,
            why: format!("{name} changed since it was verified"),
        });
    }
    Ok(text)
}

/// The fleet report a verified folder's signatures seal: fleet.json read without following a
/// link, held to the digest the manifest names, then read as `fleet` commands read it.
pub(crate) fn fleet_sealed(
    dir: &Path,
    sealed: &str,
) -> std::result::Result<crate::fleet::FleetReport, Unsaid> {
    let path = dir.join(crate::fleet::FLEET_FILE);
    let text = sealed_text(&path, crate::fsio::read::Kind::Fleet, sealed)?;
    crate::fleet::FleetReport::from_text(&path, text)
        .map(|(r, _)| r)
        .map_err(|why| Unsaid {
            code: exit::INVALID_INPUT,
            why,
        })
}

pub fn cmd_verify(dir: &Path, trust: &sign::Trust, require: &Require) -> Result<u8> {
    if !dir.is_dir() {
        return Err(InputError::Other(format!("{}: not a report folder", dir.display())).into());
    }
    let untrusted = matches!(trust, sign::Trust::Untrusted);
    let r = sign::verify_dir(dir, trust).map_err(sign_error)?;
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
        let mut sealed = Err(Unsaid {
            code: exit::VERIFY_FAILED,
            why: "the manifest names neither a node's nor a fleet's report".into(),
        });
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
        if let Some(m) = r
            .manifest
            .as_ref()
            .filter(|m| m.kind == sign::ReportKind::Fleet)
        {
            sealed = match fleet_sealed(dir, &m.evidence_sha256) {
                Ok(f) => {
                    crate::outln!("{}", crate::console::visible(&f.signature_scope()));
                    Ok(Sealed {
                        verdict: f.verdict.label().to_string(),
                        code: f.verdict.exit_code(),
                        simulated: f.simulated,
                        host: None,
                        suite: f.suite.clone(),
                        suite_origin: None,
                        suite_sha256: f.suite_sha256.clone(),
                        flagged: f.counts.get("flagged").copied().unwrap_or(0),
                    })
                }
                Err(u) => {
                    crate::outln!(
                        "(cannot say which node certificates the fleet report verified: {})",
                        crate::console::visible(&u.why)
                    );
                    Err(u)
                }
            };
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
fn certifies(dir: &Path, sealed: &str) -> (Vec<String>, std::result::Result<Sealed, Unsaid>) {
    let path = crate::evidence::Evidence::path_in(dir);
    let read = sealed_text(&path, crate::fsio::read::Kind::Evidence, sealed).and_then(|text| {
        let ev = crate::evidence::Evidence::from_text(&path, &text).map_err(|e| Unsaid {
            code: exit::INVALID_INPUT,
            why: e.to_string(),
        })?;
        Ok((ev, text))
    });
    let (ev, text) = match read {
        Ok(x) => x,
        Err(u) => return (vec![format!("certifies: not said: {}", u.why)], Err(u)),
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
    out.push(format!(
        "suite: {} (sha256 {})",
        ev.suite.name,
        ev.suite.sha256.get(..12).unwrap_or(&ev.suite.sha256)
    ));
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
        host: Some(n.hostname.clone()),
        suite: Some(ev.suite.name.clone()),
        suite_origin: Some(ev.suite.origin.clone()),
        suite_sha256: Some(ev.suite.sha256.clone()),
        flagged: 0,
    };
    (out, Ok(sealed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sealed evidence bytes that this nodecert cannot read (a newer format) are the input's
    /// matter (2), bytes other than the sealed ones a signature's (4): the gate says which, and
    /// neither passes.
    #[test]
    fn sealed_evidence_that_cannot_be_read_or_changed_is_no_pass() {
        use sha2::Digest;
        let d = tempfile::tempdir().unwrap();
        let text = format!(
            "{{\"format\": \"{}\", \"format_version\": 99}}",
            crate::evidence::FORMAT_NAME
        );
        let path = crate::evidence::Evidence::path_in(d.path());
        std::fs::write(&path, &text).unwrap();
        let digest = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let gate = Require {
            pass: true,
            allow_simulated: true,
            ..Require::default()
        };
        let (lines, sealed) = certifies(d.path(), &digest);
        assert!(lines[0].starts_with("certifies: not said: "), "{lines:?}");
        assert!(lines[0].contains("99"), "{lines:?}");
        assert_eq!(required(&gate, sealed), exit::INVALID_INPUT);
        // Without --require-pass, good signatures are all verify was asked.
        let (_, sealed) = certifies(d.path(), &digest);
        assert_eq!(required(&Require::default(), sealed), exit::PASS);
        // The same name, other bytes than the sealed ones.
        let (lines, sealed) = certifies(d.path(), &"0".repeat(64));
        assert!(
            lines[0].contains("changed since it was verified"),
            "{lines:?}"
        );
        assert_eq!(required(&gate, sealed), exit::VERIFY_FAILED);
    }

    /// DNS names compare without regard to case or the root's dot; a short name is not an
    /// FQDN, and nothing is the empty name.
    #[test]
    fn host_names_compare_as_dns_compares_them() {
        assert!(same_host("gpu-node-17", "gpu-node-17"));
        assert!(same_host(
            "GPU-Node-17.example.com",
            "gpu-node-17.EXAMPLE.com."
        ));
        assert!(same_host("gpu-node-17.", "gpu-node-17"));
        assert!(!same_host("gpu-node-17", "gpu-node-17.example.com"));
        assert!(!same_host("gpu-node-17", "gpu-node-1"));
        assert!(!same_host("gpu-node-17", "gpu-node-17x"));
        assert!(!same_host("", ""));
        assert!(!same_host(".", ""));
    }
}
