//! `nodecert verify`: every signature and every digest of a report folder.

use super::signer::sign_error;
use crate::error::{exit, InputError, Result};
use crate::sign;
use std::path::Path;

/// What `verify` must find besides good signatures (`--require-pass`).
#[derive(Debug, Clone, Default, serde::Serialize)]
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
/// code of that verdict, whether its results are simulated, and what it is of. Part of
/// `verify --json`'s output, as named here.
#[derive(Debug, Clone, serde::Serialize)]
struct Sealed {
    /// "node" or "fleet".
    kind: &'static str,
    verdict: String,
    /// The exit code of `verdict` (as `run` or `fleet report` would exit).
    exit_code: u8,
    /// The verdict the evidence file states where this nodecert judges its records otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    stated_verdict: Option<String>,
    /// Why the verdict is not a pass where its records say (what was not judged, not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    shortfall: Option<String>,
    simulated: bool,
    /// The node's host name; None for a fleet.
    host: Option<String>,
    /// The node's GPUs in a phrase ("8x NVIDIA H100 80GB HBM3"); None for a fleet.
    gpus: Option<String>,
    /// The serial of each of the node's GPUs, in nodecert's order (None: not read); None for a
    /// fleet.
    gpu_serials: Option<Vec<Option<String>>>,
    /// The suite run, by name, where known.
    suite: Option<String>,
    /// Where the suite came from: `embedded:NAME`, or its file (a node's; None for a fleet).
    suite_origin: Option<String>,
    /// The SHA-256 of the suite's file, where known.
    suite_sha256: Option<String>,
    /// When the run finished (RFC 3339); None: it did not, or a fleet's.
    finished_at: Option<String>,
    /// A fleet's nodes that passed but were flagged as slower than their siblings.
    flagged: usize,
    /// What a fleet's signature covers (which node certificates it verified); None for a node.
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
}

impl Sealed {
    /// The lines `verify` prints about what is sealed.
    fn lines(&self) -> Vec<String> {
        if let Some(scope) = &self.scope {
            return vec![scope.clone()];
        }
        let serials: Vec<&str> = self
            .gpu_serials
            .iter()
            .flatten()
            .map(|s| s.as_deref().unwrap_or("(not read)"))
            .collect();
        let mut out = vec![format!(
            "node: {} ({}); GPU serials: {}",
            self.host.as_deref().unwrap_or("(not said)"),
            self.gpus.as_deref().unwrap_or("(not said)"),
            if serials.is_empty() {
                "none".into()
            } else {
                serials.join(", ")
            }
        )];
        let sha = self.suite_sha256.as_deref().unwrap_or_default();
        out.push(format!(
            "suite: {} (sha256 {})",
            self.suite.as_deref().unwrap_or("(not said)"),
            sha.get(..12).unwrap_or(sha)
        ));
        let mut verdict = format!(
            "verdict: {}{}",
            self.verdict,
            if self.simulated { " (SIMULATED)" } else { "" }
        );
        if let Some(s) = &self.stated_verdict {
            verdict.push_str(&format!(
                " as this nodecert judges its records (evidence.json states {s})"
            ));
        }
        if let Some(why) = &self.shortfall {
            verdict.push_str(&format!("; {why}"));
        }
        out.push(verdict);
        out.push(match &self.finished_at {
            Some(t) => format!("finished: {t}"),
            None => "finished: never (the run did not finish)".into(),
        });
        out
    }
}

/// Why what the signatures seal cannot be said: the exit code that says it (4: the sealed file
/// changed since it was verified; 2: its bytes are the sealed ones, but this nodecert cannot
/// read them), and the reason.
pub(crate) struct Unsaid {
    pub(crate) code: u8,
    pub(crate) why: String,
}

/// What `--require-pass` concluded: the exit code, and what it says on stderr (each line whole,
/// "error: ..." or "note: ...").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
struct Judged {
    exit_code: u8,
    said: Vec<String>,
}

impl Judged {
    fn exit(code: u8, line: String) -> Judged {
        Judged {
            exit_code: code,
            said: vec![line],
        }
    }
}

/// The exit code under `require` of a folder whose signatures verified and seal `sealed`, and
/// why, where it is not 0.
fn required(require: &Require, sealed: &std::result::Result<Sealed, Unsaid>) -> Judged {
    let pass = Judged {
        exit_code: exit::PASS,
        said: vec![],
    };
    if !require.pass {
        return pass;
    }
    let s = match sealed {
        Ok(s) => s,
        Err(u) => {
            return Judged::exit(
                u.code,
                format!(
                    "error: --require-pass: cannot say what the signatures seal: {}",
                    crate::console::visible(&u.why)
                ),
            )
        }
    };
    let refuse = |line: String| Judged::exit(exit::INVALID_INPUT, line);
    if s.simulated && !require.allow_simulated {
        return refuse(
            "error: --require-pass: the results are simulated, not a certification of real \
             hardware (--allow-simulated lets a rehearsal through)"
                .into(),
        );
    }
    let show = |v: &Option<String>| match v {
        Some(x) => crate::console::visible(x),
        None => "(not said)".to_string(),
    };
    if let Some(want) = &require.host {
        if s.host.is_none() {
            return refuse(
                "error: --require-pass: --host names a node, and this is a fleet's report".into(),
            );
        }
        if !s.host.as_deref().is_some_and(|h| same_host(h, want)) {
            return refuse(format!(
                "error: --require-pass: the certificate is of host {}, not {}",
                show(&s.host),
                crate::console::visible(want)
            ));
        }
    }
    if let Some(want) = &require.suite {
        if s.suite.as_ref() != Some(want) {
            return refuse(format!(
                "error: --require-pass: the certificate is of suite {}, not {}",
                show(&s.suite),
                crate::console::visible(want)
            ));
        }
        // A name is a field of the suite's file: one of the embedded suites' names must be that
        // embedded suite, not a file that took its name.
        let embedded = format!("embedded:{want}");
        if crate::suite::load::embedded(want).is_some()
            && s.suite_origin.as_ref().is_some_and(|o| *o != embedded)
        {
            return refuse(format!(
                "error: --require-pass: the certificate's suite is named {} but was read from {}, \
                 not the embedded suite of that name (--suite-sha256 names a file's)",
                crate::console::visible(want),
                show(&s.suite_origin)
            ));
        }
    }
    if let Some(want) = &require.suite_sha256 {
        if s.suite_sha256.as_ref() != Some(want) {
            return refuse(format!(
                "error: --require-pass: the certificate's suite has SHA-256 {}, not {}",
                show(&s.suite_sha256),
                crate::console::visible(want)
            ));
        }
    }
    if s.exit_code != exit::PASS {
        return Judged::exit(
            s.exit_code,
            format!(
                "error: --require-pass: the signatures seal {}, not a pass",
                crate::console::visible(&s.verdict)
            ),
        );
    }
    if s.flagged > 0 {
        return Judged::exit(
            exit::PASS,
            format!(
                "note: --require-pass: every node passed, and {} {} flagged as slower than {} \
                 siblings (within {} floors)",
                s.flagged,
                if s.flagged == 1 { "was" } else { "were" },
                if s.flagged == 1 { "its" } else { "their" },
                if s.flagged == 1 { "its" } else { "their" },
            ),
        );
    }
    pass
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

/// `verify --json`: the one document it prints, versioned as evidence is. What the signatures
/// and digests are (the fields of [`sign::VerifyReport`]), what they seal, and what
/// `--require-pass` made of it, with the exit code the command exits with.
#[derive(serde::Serialize)]
struct Output<'a> {
    format: &'static str,
    format_version: u32,
    /// Every signature and digest as `verify` requires them (the "VERIFIED" line).
    verified: bool,
    /// The code `verify` exits with.
    exit_code: u8,
    #[serde(flatten)]
    report: &'a sign::VerifyReport,
    /// What the signatures seal; None where they did not verify, or it cannot be said.
    sealed: Option<&'a Sealed>,
    /// Why what they seal cannot be said, where they verified.
    sealed_not_said: Option<&'a str>,
    /// What `--require-pass` asked and concluded; None without it.
    require: Option<RequireOut<'a>>,
}

#[derive(serde::Serialize)]
struct RequireOut<'a> {
    #[serde(flatten)]
    asked: &'a Require,
    /// None where the signatures did not verify (nothing was judged).
    judged: Option<&'a Judged>,
}

/// The name and version of `verify --json`'s document.
pub const JSON_FORMAT: &str = "nodecert-verify";
pub const JSON_FORMAT_VERSION: u32 = 1;

pub fn cmd_verify(dir: &Path, trust: &sign::Trust, require: &Require, json: bool) -> Result<u8> {
    if !dir.is_dir() {
        return Err(InputError::Other(format!("{}: not a report folder", dir.display())).into());
    }
    let untrusted = matches!(trust, sign::Trust::Untrusted);
    let r = sign::verify_dir(dir, trust).map_err(sign_error)?;
    // What the signatures vouch for, from the evidence bytes they name: a certificate that
    // verifies is not a pass, and one copied from another node verifies as well.
    let sealed = r.ok().then(|| what_is_sealed(dir, &r));
    let judged = sealed.as_ref().map(|s| required(require, s));
    let code = judged.as_ref().map_or(exit::VERIFY_FAILED, |j| j.exit_code);
    if json {
        let out = Output {
            format: JSON_FORMAT,
            format_version: JSON_FORMAT_VERSION,
            verified: r.ok(),
            exit_code: code,
            report: &r,
            sealed: sealed.as_ref().and_then(|s| s.as_ref().ok()),
            sealed_not_said: sealed
                .as_ref()
                .and_then(|s| s.as_ref().err())
                .map(|u| u.why.as_str()),
            require: require.pass.then_some(RequireOut {
                asked: require,
                judged: judged.as_ref(),
            }),
        };
        let text = serde_json::to_string_pretty(&out)
            .map_err(|e| InputError::Other(format!("cannot write verify's JSON: {e}")))?;
        crate::outln!("{}", crate::console::json_visible(&text));
    } else {
        show(&r, sealed.as_ref());
    }
    if let Some(j) = &judged {
        for line in &j.said {
            crate::errln!("{line}");
        }
        return Ok(code);
    }
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
    Ok(code)
}

/// `verify`'s text on stdout: the report of the signatures and digests, the VERIFIED or NOT
/// VERIFIED line, and what the signatures seal where they verified.
fn show(r: &sign::VerifyReport, sealed: Option<&std::result::Result<Sealed, Unsaid>>) {
    crate::out!("{r}");
    let sim = if r.simulated == Some(true) {
        " (SIMULATED RESULTS: not a certification of real hardware)"
    } else {
        ""
    };
    let Some(sealed) = sealed else {
        crate::outln!("NOT VERIFIED{sim}");
        return;
    };
    crate::outln!("VERIFIED{sim}");
    let fleet = r
        .manifest
        .as_ref()
        .is_some_and(|m| m.kind == sign::ReportKind::Fleet);
    let lines = match sealed {
        Ok(s) => s.lines(),
        // A fleet's signature seals what its report read, not each node's certificate.
        Err(u) if fleet => vec![format!(
            "(cannot say which node certificates the fleet report verified: {})",
            u.why
        )],
        Err(u) => vec![format!("certifies: not said: {}", u.why)],
    };
    for line in lines {
        crate::outln!("{}", crate::console::visible(&line));
    }
}

/// What the signatures of a folder that verified seal: a node's evidence or a fleet's report,
/// as the manifest says, read from the bytes it names.
fn what_is_sealed(dir: &Path, r: &sign::VerifyReport) -> std::result::Result<Sealed, Unsaid> {
    let Some(m) = r.manifest.as_ref() else {
        return Err(Unsaid {
            code: exit::VERIFY_FAILED,
            why: "the manifest names neither a node's nor a fleet's report".into(),
        });
    };
    match m.kind {
        sign::ReportKind::Node => certifies(dir, &m.evidence_sha256),
        sign::ReportKind::Fleet => fleet_sealed(dir, &m.evidence_sha256).map(|f| Sealed {
            kind: "fleet",
            verdict: f.verdict.label().to_string(),
            exit_code: f.verdict.exit_code(),
            stated_verdict: None,
            shortfall: None,
            simulated: f.simulated,
            host: None,
            gpus: None,
            gpu_serials: None,
            suite: f.suite.clone(),
            suite_origin: None,
            suite_sha256: f.suite_sha256.clone(),
            finished_at: None,
            flagged: f.counts.get("flagged").copied().unwrap_or(0),
            scope: Some(f.signature_scope()),
        }),
    }
}

/// What a verified node folder certifies, read from its evidence when that is still the bytes
/// the manifest names: the node (host, GPUs and their serials), the verdict its records give as
/// this nodecert judges them (and the one the file states, where another), what it was signed as,
/// and when it finished.
fn certifies(dir: &Path, sealed: &str) -> std::result::Result<Sealed, Unsaid> {
    let path = crate::evidence::Evidence::path_in(dir);
    let text = sealed_text(&path, crate::fsio::read::Kind::Evidence, sealed)?;
    let ev = crate::evidence::Evidence::from_text(&path, &text).map_err(|e| Unsaid {
        code: exit::INVALID_INPUT,
        why: e.to_string(),
    })?;
    let n = &ev.node;
    let stated = crate::evidence::stated_verdict_in(&path, &text)
        .ok()
        .flatten();
    Ok(Sealed {
        kind: "node",
        verdict: ev.verdict.label().to_string(),
        exit_code: ev.verdict.exit_code(),
        stated_verdict: stated
            .filter(|s| *s != ev.verdict)
            .map(|s| s.label().to_string()),
        shortfall: ev.shortfall_text(),
        simulated: ev.simulated,
        host: Some(n.hostname.clone()),
        gpus: Some(n.summary()),
        gpu_serials: Some(n.gpus.iter().map(|g| g.serial.clone()).collect()),
        suite: Some(ev.suite.name.clone()),
        suite_origin: Some(ev.suite.origin.clone()),
        suite_sha256: Some(ev.suite.sha256.clone()),
        finished_at: ev.finished_at.map(|t| t.to_rfc3339()),
        flagged: 0,
        scope: None,
    })
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
        let sealed = certifies(d.path(), &digest);
        let why = &sealed.as_ref().err().unwrap().why;
        assert!(
            why.contains("99 is newer than this nodecert reads"),
            "{why}"
        );
        let j = required(&gate, &sealed);
        assert_eq!(j.exit_code, exit::INVALID_INPUT);
        assert!(
            j.said[0].starts_with("error: --require-pass: cannot say what the signatures seal: "),
            "{j:?}"
        );
        // Without --require-pass, good signatures are all verify was asked.
        let j = required(&Require::default(), &sealed);
        assert_eq!((j.exit_code, j.said.len()), (exit::PASS, 0));
        // The same name, other bytes than the sealed ones.
        let sealed = certifies(d.path(), &"0".repeat(64));
        let why = &sealed.as_ref().err().unwrap().why;
        assert!(why.contains("changed since it was verified"), "{why}");
        assert_eq!(required(&gate, &sealed).exit_code, exit::VERIFY_FAILED);
    }

    /// A node's certificate as a gate reads it: a pass of real hardware, host node-1, the
    /// embedded suite h100-sxm-8.
    fn node_pass() -> Sealed {
        Sealed {
            kind: "node",
            verdict: "PASS".into(),
            exit_code: exit::PASS,
            stated_verdict: None,
            shortfall: None,
            simulated: false,
            host: Some("node-1".into()),
            gpus: Some("8x NVIDIA H100 80GB HBM3".into()),
            gpu_serials: Some(vec![Some("1650".into())]),
            suite: Some("h100-sxm-8".into()),
            suite_origin: Some("embedded:h100-sxm-8".into()),
            suite_sha256: Some("ab".repeat(32)),
            finished_at: None,
            flagged: 0,
            scope: None,
        }
    }

    /// Each thing the gate requires, on its own: what it passes, what it refuses and with which
    /// code, and that it says why.
    #[test]
    fn the_gate_requires_each_thing_it_is_asked_and_says_why() {
        let gate = |edit: &dyn Fn(&mut Require), sealed: &dyn Fn(&mut Sealed)| {
            let mut r = Require {
                pass: true,
                ..Require::default()
            };
            edit(&mut r);
            let mut s = node_pass();
            sealed(&mut s);
            required(&r, &Ok(s))
        };
        let none = |_: &mut Require| {};
        let same = |_: &mut Sealed| {};
        let pass = gate(&none, &same);
        assert_eq!((pass.exit_code, pass.said.len()), (exit::PASS, 0));
        // Simulated: refused unless allowed.
        let sim = |s: &mut Sealed| s.simulated = true;
        let j = gate(&none, &sim);
        assert_eq!(j.exit_code, exit::INVALID_INPUT);
        assert!(j.said[0].contains("simulated"), "{j:?}");
        let allow = |r: &mut Require| r.allow_simulated = true;
        assert_eq!(gate(&allow, &sim).exit_code, exit::PASS);
        // Host: its own passes (as DNS compares), another's or a fleet's is refused.
        let host = |r: &mut Require| r.host = Some("NODE-1.".into());
        assert_eq!(gate(&host, &same).exit_code, exit::PASS);
        let other = |r: &mut Require| r.host = Some("node-2".into());
        let j = gate(&other, &same);
        assert_eq!(j.exit_code, exit::INVALID_INPUT);
        assert_eq!(
            j.said,
            ["error: --require-pass: the certificate is of host node-1, not node-2"]
        );
        let fleet = |s: &mut Sealed| s.host = None;
        let j = gate(&host, &fleet);
        assert_eq!(j.exit_code, exit::INVALID_INPUT);
        assert!(j.said[0].contains("a fleet's report"), "{j:?}");
        // Suite by name: its own passes, another is refused, and an embedded suite's name read
        // from a file is not that suite.
        let suite = |r: &mut Require| r.suite = Some("h100-sxm-8".into());
        assert_eq!(gate(&suite, &same).exit_code, exit::PASS);
        let other = |r: &mut Require| r.suite = Some("h200-sxm-8".into());
        assert_eq!(gate(&other, &same).exit_code, exit::INVALID_INPUT);
        let file = |s: &mut Sealed| s.suite_origin = Some("mine.toml".into());
        let j = gate(&suite, &file);
        assert_eq!(j.exit_code, exit::INVALID_INPUT);
        assert!(j.said[0].contains("read from mine.toml"), "{j:?}");
        // A suite name no embedded suite has is the file's own.
        let mine = |s: &mut Sealed| {
            s.suite = Some("mine".into());
            s.suite_origin = Some("mine.toml".into());
        };
        let named = |r: &mut Require| r.suite = Some("mine".into());
        assert_eq!(gate(&named, &mine).exit_code, exit::PASS);
        // Suite by digest.
        let sha = |r: &mut Require| r.suite_sha256 = Some("ab".repeat(32));
        assert_eq!(gate(&sha, &same).exit_code, exit::PASS);
        let other = |r: &mut Require| r.suite_sha256 = Some("cd".repeat(32));
        let j = gate(&other, &same);
        assert_eq!(j.exit_code, exit::INVALID_INPUT);
        assert!(j.said[0].contains("SHA-256"), "{j:?}");
        // Another verdict: its own code, whatever else holds.
        let partial = |s: &mut Sealed| {
            s.verdict = "PARTIAL".into();
            s.exit_code = 7;
        };
        let j = gate(&none, &partial);
        assert_eq!(
            (j.exit_code, j.said.clone()),
            (
                7,
                vec!["error: --require-pass: the signatures seal PARTIAL, not a pass".to_string()]
            )
        );
        // A fleet that passed with flagged nodes: 0, with a note; one flagged node is "was".
        let flagged = |n: usize| {
            move |s: &mut Sealed| {
                s.host = None;
                s.flagged = n;
            }
        };
        let j = gate(&none, &flagged(1));
        assert_eq!(j.exit_code, exit::PASS);
        assert_eq!(
            j.said,
            [
                "note: --require-pass: every node passed, and 1 was flagged as slower than its \
              siblings (within its floors)"
            ]
        );
        let j = gate(&none, &flagged(2));
        assert!(j.said[0].contains("2 were flagged"), "{j:?}");
        assert_eq!(gate(&none, &flagged(0)).said.len(), 0);
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
