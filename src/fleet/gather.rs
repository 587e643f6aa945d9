//! Reading a fleet's node folders, one at a time, into small summaries.
//!
//! A folder given to `fleet report` is either one node's report folder (it holds evidence.json)
//! or a shared folder with one subfolder per node, as the fleet jobs write it, and maybe the
//! job's list of nodes ([`super::EXPECTED_FILE`]). Each node's evidence is read (bounded,
//! format- and simulation-checked by [`Evidence::read`]), its signature verified when it is
//! signed, and only what the fleet compares is kept.

use super::{Figure, FigureKey, NodeResult, NodeVerdict, SignatureState};
use crate::diff::{direction, Better};
use crate::evidence::{Evidence, Status, Subject, EVIDENCE_FILE};
use crate::sign::{Trust, MANIFEST_FILE};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most node folders one `fleet report` reads (a typo'd path to `/` stops here).
pub const MAX_NODES: usize = 100_000;
/// The node list file's limit (a list of 100,000 names fits easily).
const MAX_EXPECTED_BYTES: u64 = 4 << 20;

/// The fleet's table of figures: each distinct figure (check, metric, subject, unit, limit)
/// once, shared by the nodes that measured it, so that a node's summary is its values alone and
/// a fleet of thousands takes little more memory than a few nodes.
#[derive(Debug, Default)]
pub struct Keys(std::collections::HashMap<String, Arc<FigureKey>>);

impl Keys {
    /// The shared key of a figure.
    pub fn intern(&mut self, k: FigureKey) -> Arc<FigureKey> {
        let name = format!(
            "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}",
            k.check,
            k.metric,
            serde_json::to_string(&k.subject).unwrap_or_default(),
            k.unit,
            k.higher_is_better,
            k.limit.map(f64::to_bits),
            k.conditions
        );
        let next = self.0.len() as u32;
        self.0
            .entry(name)
            .or_insert_with(|| Arc::new(FigureKey { id: next, ..k }))
            .clone()
    }
}

/// One node, as read: its result before the fleet's rules, and what those rules compare.
#[derive(Debug, Clone)]
pub struct NodeSummary {
    pub result: NodeResult,
    /// Its judged figures (empty when its evidence could not be read).
    pub figures: Vec<Figure>,
    /// Serials and UUIDs of its GPUs: the same one on two nodes means copied evidence.
    pub gpu_ids: Vec<String>,
    /// Whether evidence was read (false: none, or refused before it was read).
    pub read: bool,
    /// The SHA-256 of the suite it ran, resolved (its `extends` chain merged, as the evidence
    /// records it), when evidence was read: nodes that name one suite must have run the same
    /// one, whatever files it came from.
    pub suite_sha256: Option<String>,
}

/// A node folder to read, and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFolder {
    pub name: String,
    pub path: PathBuf,
}

/// What the folders given hold: the node folders, the nodes the job expected, the job's id
/// (from the node list's `# job: ID` line) and the suite it ran (its `# suite: NAME` line, and
/// `# suite-sha256: HEX`, the digest of the suite as its nodes run it).
#[derive(Debug, Default)]
pub struct Found {
    pub folders: Vec<NodeFolder>,
    pub expected: Vec<String>,
    pub job: Option<String>,
    pub suite: Option<String>,
    pub suite_sha256: Option<String>,
}

/// The longest suite name a node list or `--suite` may name.
pub const MAX_SUITE_NAME: usize = 200;

/// Whether `name` can be a job's suite as a node list records it: not empty, at most
/// [`MAX_SUITE_NAME`] bytes, no control characters, no space at either end (a line of the list
/// holds it as it is).
pub fn check_suite_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > MAX_SUITE_NAME
        || name.trim() != name
        || name.chars().any(char::is_control)
    {
        return Err(format!(
            "'{}' is not a suite name a node list can hold (1 to {MAX_SUITE_NAME} bytes, no \
             control characters, no space at either end)",
            crate::console::visible(name)
        ));
    }
    Ok(())
}

/// The node folders under the folders given, the node names the job expected and its id.
/// Errors name a folder that cannot be listed, or a node list that is not one.
pub fn find(inputs: &[PathBuf]) -> Result<Found, String> {
    let mut nodes = Vec::new();
    let mut expected = Vec::new();
    let mut job: Option<String> = None;
    let mut suite: Option<String> = None;
    let mut suite_sha256: Option<String> = None;
    for input in inputs {
        let meta = std::fs::symlink_metadata(input)
            .map_err(|e| format!("{}: {}", input.display(), crate::error::lower(&e)))?;
        if !meta.is_dir() {
            return Err(format!(
                "{}: not a folder (give a node's report folder or a fleet's shared folder)",
                input.display()
            ));
        }
        if !input.join(EVIDENCE_FILE).exists() && input.join(super::FLEET_FILE).exists() {
            return Err(format!(
                "{}: a fleet report's folder, not a node's: give the nodes' folders, or the shared folder that holds them",
                input.display()
            ));
        }
        if input.join(EVIDENCE_FILE).exists() || input.join(MANIFEST_FILE).exists() {
            nodes.push(NodeFolder {
                name: folder_name(input),
                path: input.clone(),
            });
            continue;
        }
        let list = input.join(super::EXPECTED_FILE);
        if list.exists() {
            let List {
                names,
                job: id,
                suite: ran,
                suite_sha256: digest,
            } = read_list(&list)?;
            expected.extend(names);
            match (&suite, ran) {
                (Some(a), Some(b)) if *a != b => {
                    return Err(format!(
                        "{}: suite '{}', but another folder given ran suite '{}': report one job \
                         at a time",
                        list.display(),
                        crate::console::visible(&b),
                        crate::console::visible(a)
                    ))
                }
                (None, Some(b)) => suite = Some(b),
                _ => {}
            }
            match (&suite_sha256, digest) {
                (Some(a), Some(b)) if *a != b => {
                    return Err(format!(
                        "{}: suite SHA-256 {b}, but another folder given ran a suite of SHA-256 \
                         {a}: report one job at a time",
                        list.display()
                    ))
                }
                (None, Some(b)) => suite_sha256 = Some(b),
                _ => {}
            }
            match (&job, id) {
                (Some(a), Some(b)) if *a != b => {
                    return Err(format!(
                    "{}: job {b}, but another folder given is of job {a}: report one job at a time",
                    list.display()
                ))
                }
                (None, Some(b)) => job = Some(b),
                _ => {}
            }
        }
        let mut subs = Vec::new();
        for entry in std::fs::read_dir(input)
            .map_err(|e| format!("{}: {}", input.display(), crate::error::lower(&e)))?
        {
            let entry =
                entry.map_err(|e| format!("{}: {}", input.display(), crate::error::lower(&e)))?;
            // Folders only; a link is refused when read (it could point anywhere).
            let t = entry.file_type().map_err(|e| crate::error::lower(&e))?;
            // A fleet report written into the shared folder (the job's own) is not a node.
            if t.is_dir()
                && entry.path().join(super::FLEET_FILE).exists()
                && !entry.path().join(EVIDENCE_FILE).exists()
            {
                continue;
            }
            if t.is_dir() || t.is_symlink() {
                subs.push(NodeFolder {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    path: entry.path(),
                });
            }
            if subs.len() > MAX_NODES {
                return Err(format!(
                    "{}: more than {MAX_NODES} folders: is this a fleet's folder?",
                    input.display()
                ));
            }
        }
        nodes.extend(subs);
    }
    nodes.sort_by(|a, b| super::natural_cmp(&a.name, &b.name).then(a.path.cmp(&b.path)));
    expected.sort_by(|a, b| super::natural_cmp(a, b));
    expected.dedup();
    Ok(Found {
        folders: nodes,
        expected,
        job,
        suite,
        suite_sha256,
    })
}

fn folder_name(p: &Path) -> String {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    abs.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// What a node list says: its node names, and the job's id and suite (name and digest) where
/// it names them.
#[derive(Debug, Default, PartialEq, Eq)]
struct List {
    names: Vec<String>,
    job: Option<String>,
    suite: Option<String>,
    suite_sha256: Option<String>,
}

/// The names in a node list, one per line (blank lines and `#` comments ignored), the job's id
/// from a `# job: ID` line and the suite every node was to run from a `# suite: NAME` line.
fn read_list(path: &Path) -> Result<List, String> {
    let f = crate::fsio::read::open(path, false)
        .map_err(|e| format!("{}: {}", path.display(), crate::error::lower(&e)))?;
    let bytes = crate::fsio::read::read_limited(f, MAX_EXPECTED_BYTES, "a node list")
        .map_err(|e| format!("{}: {}", path.display(), crate::error::lower(&e)))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    let mut out = Vec::new();
    let mut job = None;
    let mut suite: Option<String> = None;
    let mut suite_sha256: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(id) = l.strip_prefix("# job:") {
            let id = id.trim();
            if id.is_empty()
                || id.len() > 64
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(format!(
                    "{}:{}: {:?} is not a job id",
                    path.display(),
                    i + 1,
                    crate::console::visible(id)
                ));
            }
            job = Some(id.to_string());
            continue;
        }
        if let Some(name) = l.strip_prefix("# suite:") {
            let name = name.trim();
            check_suite_name(name).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
            if suite.as_deref().is_some_and(|s| s != name) {
                return Err(format!(
                    "{}:{}: a second suite line names another suite",
                    path.display(),
                    i + 1
                ));
            }
            suite = Some(name.to_string());
            continue;
        }
        if let Some(hex) = l.strip_prefix("# suite-sha256:") {
            let hex = hex.trim();
            if !crate::sign::is_hex64(hex) {
                return Err(format!(
                    "{}:{}: '{}' is not a SHA-256 (64 lowercase hex digits)",
                    path.display(),
                    i + 1,
                    crate::console::visible(hex)
                ));
            }
            if suite_sha256.as_deref().is_some_and(|s| s != hex) {
                return Err(format!(
                    "{}:{}: a second suite-sha256 line names another digest",
                    path.display(),
                    i + 1
                ));
            }
            suite_sha256 = Some(hex.to_string());
            continue;
        }
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if crate::commands::check_node_name(l).is_err() {
            return Err(format!(
                "{}:{}: {:?} is not a node name",
                path.display(),
                i + 1,
                crate::console::visible(l)
            ));
        }
        out.push(l.to_string());
    }
    if suite_sha256.is_some() && suite.is_none() {
        return Err(format!(
            "{}: a suite-sha256 line, but no suite line naming the suite",
            path.display()
        ));
    }
    Ok(List {
        names: out,
        job,
        suite,
        suite_sha256,
    })
}

/// A node's result before anything is known of it: not tested, unsigned, no checks.
pub fn blank(name: &str) -> NodeResult {
    NodeResult {
        name: name.to_string(),
        folder: String::new(),
        verdict: NodeVerdict::NotTested,
        own_verdict: None,
        why: Vec::new(),
        hostname: None,
        suite: None,
        hardware: None,
        gpu_model: None,
        simulated: false,
        job: None,
        checks: BTreeMap::new(),
        failed_checks: Vec::new(),
        signature: SignatureState::Unsigned,
        unlisted: false,
        fabric_wide_only: false,
    }
}

/// Read one node folder.
pub fn read_node(folder: &NodeFolder, trust: &Trust, keys: &mut Keys) -> NodeSummary {
    let mut result = blank(&folder.name);
    result.folder = folder.path.display().to_string();
    let refuse = |mut r: NodeResult, why: String| {
        r.verdict = NodeVerdict::Refused;
        r.why.push(why);
        NodeSummary {
            result: r,
            figures: Vec::new(),
            gpu_ids: Vec::new(),
            read: false,
            suite_sha256: None,
        }
    };
    // The name reaches scontrol and kubectl as an argument, and every page: a host name only.
    if crate::commands::check_node_name(&folder.name).is_err() {
        return refuse(
            result,
            "its folder's name is not a node name (letters, digits, '.', '-', '_')".into(),
        );
    }
    match std::fs::symlink_metadata(&folder.path) {
        Ok(m) if m.file_type().is_symlink() => {
            return refuse(
                result,
                "its folder is a symbolic link, which is not followed".into(),
            )
        }
        Ok(_) => {}
        Err(e) => {
            return refuse(
                result,
                format!("cannot read its folder: {}", crate::error::lower(&e)),
            )
        }
    }
    let evidence = folder.path.join(EVIDENCE_FILE);
    // The node's own file, not one a link points to elsewhere on this host.
    if std::fs::symlink_metadata(&evidence).is_ok_and(|m| !m.file_type().is_file()) {
        return refuse(
            result,
            format!("its {EVIDENCE_FILE} is not a regular file (a link is not followed)"),
        );
    }
    if !evidence.exists() && !folder.path.join(MANIFEST_FILE).exists() {
        result
            .why
            .push("no evidence: the node did not report".into());
        return NodeSummary {
            result,
            figures: Vec::new(),
            gpu_ids: Vec::new(),
            read: false,
            suite_sha256: None,
        };
    }
    if !folder.path.join(MANIFEST_FILE).exists() && !matches!(trust, Trust::Untrusted) {
        return refuse(
            result,
            "its report is not signed, but a trusted signer was required (--pubkey or --allowed-signers)"
                .into(),
        );
    }
    // The evidence digest of a manifest that verified: the evidence read below must be those
    // bytes (a file renamed in between would otherwise borrow the signature's standing).
    let mut signed_evidence: Option<String> = None;
    if folder.path.join(MANIFEST_FILE).exists() {
        result.signature = match crate::sign::verify_dir(&folder.path, trust) {
            Err(e) => SignatureState::Failed {
                problems: vec![e.to_string()],
            },
            Ok(r) => {
                signed_evidence = r.manifest.as_ref().map(|m| m.evidence_sha256.clone());
                let untrusted = matches!(trust, Trust::Untrusted);
                // Without a trusted signer, only the signature's own trust is missing.
                let problems: Vec<String> = r
                    .problems
                    .iter()
                    .filter(|p| !(untrusted && p.starts_with("no trusted signer")))
                    .cloned()
                    .collect();
                let any_bad = r.signatures.iter().any(|s| {
                    matches!(
                        s.status,
                        crate::sign::SigStatus::Invalid { .. }
                            | crate::sign::SigStatus::Duplicate { .. }
                    )
                });
                let fleets = r
                    .manifest
                    .as_ref()
                    .is_some_and(|m| m.kind != crate::sign::ReportKind::Node);
                if fleets {
                    SignatureState::Failed {
                        problems: vec![format!(
                            "{MANIFEST_FILE} is a fleet report's, not a node's"
                        )],
                    }
                } else if r.ok() {
                    SignatureState::Verified {
                        signers: r
                            .signatures
                            .iter()
                            .filter(|s| s.status == crate::sign::SigStatus::Trusted)
                            .map(|s| {
                                s.principal
                                    .clone()
                                    .or_else(|| s.fingerprint.clone())
                                    .unwrap_or_default()
                            })
                            .collect(),
                    }
                } else if untrusted && problems.is_empty() && !any_bad {
                    SignatureState::Intact
                } else {
                    SignatureState::Failed { problems }
                }
            }
        };
        if let SignatureState::Failed { problems } = &result.signature {
            let first = problems.first().cloned().unwrap_or_default();
            return refuse(
                result.clone(),
                format!("its signed report does not verify: {first}"),
            );
        }
    }
    // The digest of the resolved suite as the file holds it (not of the file given: a parent
    // edited on one node changes what the node ran, a comment does not; nor of what this
    // nodecert would write of it: a job's digest is its own nodecert's).
    let (ev, digest, file) = match Evidence::read_with_suite_digest(&evidence) {
        Ok(x) => x,
        Err(e) => return refuse(result, format!("its evidence cannot be read: {e}")),
    };
    if let Some(why) = not_the_signed(signed_evidence.as_deref(), &file) {
        return refuse(result, why);
    }
    summarize_with(result, &ev, digest, keys)
}

/// Why the evidence read (its SHA-256 `file`) is not the one whose signature was verified
/// (`signed`, the manifest's evidence digest), if it is not: renamed in between, it would borrow
/// the signature's standing.
fn not_the_signed(signed: Option<&str>, file: &str) -> Option<String> {
    signed.filter(|s| *s != file).map(|_| {
        format!(
            "its {EVIDENCE_FILE} changed after its signature was verified (not the signed file): \
             read again"
        )
    })
}

/// What the fleet keeps of a node's evidence, its suite's digest taken as this nodecert writes
/// the suite.
pub fn summarize(result: NodeResult, ev: &Evidence, keys: &mut Keys) -> NodeSummary {
    let digest = crate::suite::resolved_sha256(&ev.suite.resolved);
    summarize_with(result, ev, digest, keys)
}

/// What the fleet keeps of a node's evidence whose resolved suite has the digest `digest`.
fn summarize_with(
    mut result: NodeResult,
    ev: &Evidence,
    digest: String,
    keys: &mut Keys,
) -> NodeSummary {
    let own = ev.assess();
    result.own_verdict = Some(own);
    result.verdict = NodeVerdict::of(own);
    result.hostname = Some(ev.node.hostname.clone());
    result.suite = Some(ev.suite.name.clone());
    result.hardware = Some(ev.node.summary());
    result.gpu_model = ev.node.gpus.first().map(|g| g.name.clone());
    result.simulated = ev.simulated;
    result.job = ev.environment.job.clone();
    // Every check that failed or erred did so for the fabric-wide finding alone.
    let bad = |st: Status| matches!(st, Status::Fail | Status::Error);
    let failed: Vec<&crate::evidence::CheckRecord> =
        ev.checks.iter().filter(|c| bad(c.status)).collect();
    result.fabric_wide_only = own == crate::evidence::Verdict::Fail
        && !failed.is_empty()
        && failed.iter().all(|c| {
            let why: Vec<&crate::evidence::Finding> =
                c.findings.iter().filter(|f| bad(f.status)).collect();
            !why.is_empty()
                && why.iter().all(|f| {
                    f.metric.as_deref() == Some(crate::checks::fabric::FABRIC_WIDE_FINDING)
                })
        });
    // Why, worst first: the failures, then the checks that never ran, then what is only to
    // investigate (a drain's or a rerun's reason is the first).
    let mut to_investigate = Vec::new();
    for c in &ev.checks {
        result.checks.insert(c.id.clone(), c.status);
        if matches!(c.status, Status::Fail | Status::Error) {
            result.failed_checks.push(c.id.clone());
            result.why.push(format!("{}: {}", c.id, c.summary));
        }
        // Readings not available there: what was not judged, by check.
        if c.partial() && !matches!(c.status, Status::Fail | Status::Error) {
            to_investigate.push(format!("{}: {}", c.id, c.summary));
        }
        // A link or fabric suspect the node took part in: in service, but to investigate.
        if c.kind == "fabric" && c.status == Status::Warn {
            to_investigate.push(format!("{}: {}", c.id, c.summary));
            if result.verdict == NodeVerdict::Pass {
                result.verdict = NodeVerdict::Flagged;
            }
        }
    }
    for id in &ev.never_ran {
        result.why.push(format!("{id}: never ran"));
    }
    result.why.extend(to_investigate);
    // One figure per (check, metric, subject): the worst status any finding gave it, and the
    // limit the finding that held it to one named.
    let mut found: Vec<(FigureKey, f64, Status)> = Vec::new();
    let mut index: std::collections::HashMap<(String, String, String), usize> = Default::default();
    for c in &ev.checks {
        let conditions = crate::diff::conditions(c).join("; ");
        // Each metric's place by name and subject (the first of each), looked up for every
        // finding: a check of a node's evidence may hold hundreds of thousands of each.
        let mut metrics: HashMap<(&str, &Subject), usize> = HashMap::new();
        for (i, m) in c.metrics.iter().enumerate() {
            metrics.entry((m.name.as_str(), &m.subject)).or_insert(i);
        }
        for f in c.findings.iter().filter(|f| f.is_judgement()) {
            let Some(name) = &f.metric else { continue };
            let Some(m) = figure_of(&metrics, name, &f.subject).map(|i| &c.metrics[i]) else {
                continue;
            };
            let Some(better) = direction(&m.name, &m.unit) else {
                continue;
            };
            if !m.median.is_finite() {
                continue;
            }
            let higher = better == Better::Higher;
            let limit = f
                .limit
                .and_then(|l| if higher { l.fail_below } else { l.fail_above });
            let at = (
                c.id.clone(),
                m.name.clone(),
                serde_json::to_string(&m.subject).unwrap_or_default(),
            );
            match index.get(&at) {
                Some(&i) => {
                    let (k, _, st) = &mut found[i];
                    *st = (*st).max(f.status);
                    k.limit = k.limit.or(limit);
                }
                None => {
                    index.insert(at, found.len());
                    found.push((
                        FigureKey {
                            id: 0,
                            check: c.id.clone(),
                            metric: m.name.clone(),
                            subject: m.subject.clone(),
                            unit: m.unit.clone(),
                            higher_is_better: higher,
                            limit,
                            conditions: conditions.clone(),
                        },
                        m.median,
                        f.status,
                    ));
                }
            }
        }
    }
    let figures: Vec<Figure> = found
        .into_iter()
        .map(|(k, value, status)| Figure {
            key: keys.intern(k),
            value,
            status,
        })
        .collect();
    let mut gpu_ids = Vec::new();
    for g in &ev.node.gpus {
        if !g.uuid.is_empty() {
            gpu_ids.push(format!("UUID {}", g.uuid));
        }
        if let Some(s) = g.serial.as_ref().filter(|s| !s.is_empty()) {
            gpu_ids.push(format!("serial {s}"));
        }
    }
    NodeSummary {
        result,
        figures,
        gpu_ids,
        read: true,
        suite_sha256: Some(digest),
    }
}

/// Whether a metric's subject is the one a finding judges: the same, or the same but for what
/// the metric leaves out (a collective's figures name only their size, and a copy both ways
/// names its pair without saying "both ways"; their findings say it).
/// The first metric `name` that is the figure of a finding about `subject`: a metric whose
/// subject is the finding's, but for the collective or the pairing it does not name (a finding
/// about all_reduce at 8 GiB is about the metric of 8 GiB in the all_reduce check).
fn figure_of(
    metrics: &HashMap<(&str, &Subject), usize>,
    name: &str,
    subject: &Subject,
) -> Option<usize> {
    let mut tries = vec![subject.clone()];
    for strip in [
        |s: &mut Subject| s.op = None,
        |s: &mut Subject| s.pairing = None,
        |s: &mut Subject| {
            s.op = None;
            s.pairing = None
        },
    ] {
        let mut s = subject.clone();
        strip(&mut s);
        tries.push(s);
    }
    tries
        .iter()
        .filter_map(|s| metrics.get(&(name, s)).copied())
        .min()
}

/// What [`figure_of`] finds, said directly (the search it replaced, kept to test it by).
#[cfg(test)]
fn same_figure(metric: &crate::evidence::Subject, finding: &crate::evidence::Subject) -> bool {
    let mut f = finding.clone();
    if metric.op.is_none() {
        f.op = None;
    }
    if metric.pairing.is_none() {
        f.pairing = None;
    }
    *metric == f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node whose only failure is the fabric-wide finding is marked so (not drained by
    /// `fleet drain`); any other failure beside it, or an error, makes it an ordinary failure.
    #[test]
    fn a_node_failed_only_for_the_fabric_as_a_whole_is_marked() {
        use crate::checks::judge::finding;
        use crate::evidence::{CheckRecord, Finding};
        let base = crate::testutil::simulated("h200-vm-1", &[]);
        let with = |extra: Vec<Finding>, status: Status| {
            let mut ev = base.clone();
            let mut c: CheckRecord = ev.checks[0].clone();
            c.id = "fabric".into();
            c.kind = "fabric".into();
            c.status = status;
            c.findings = extra;
            ev.checks.push(c);
            ev.update_verdict();
            let mut keys = Keys::default();
            summarize(blank("n1"), &ev, &mut keys)
                .result
                .fabric_wide_only
        };
        let wide = || {
            finding(
                Status::Fail,
                Subject::node(),
                "fabric-wide",
                "",
                "the fabric as a whole",
            )
            .on(crate::checks::fabric::FABRIC_WIDE_FINDING)
        };
        assert!(with(vec![wide()], Status::Fail));
        let other = finding(Status::Fail, Subject::node(), "slow", "", "node n1 is slow");
        assert!(!with(vec![wide(), other], Status::Fail));
        assert!(!with(vec![], Status::Error));
        let mut ev = base.clone();
        ev.update_verdict();
        assert!(
            !summarize(blank("n1"), &ev, &mut Keys::default())
                .result
                .fabric_wide_only
        );
    }

    /// The evidence read must be the bytes whose signature was verified; an unsigned folder
    /// has none to be held to.
    #[test]
    fn the_evidence_read_is_held_to_the_verified_signature() {
        assert_eq!(not_the_signed(None, "ab"), None);
        assert_eq!(not_the_signed(Some("ab"), "ab"), None);
        let why = not_the_signed(Some("ab"), "cd").unwrap();
        assert!(
            why.contains("changed after its signature was verified"),
            "{why}"
        );
    }

    #[test]
    fn a_findings_figure_is_the_first_metric_of_its_subject_less_what_the_metric_does_not_name() {
        use crate::suite::CollectiveOp;
        let base = Subject::op_size(CollectiveOp::AllReduce, 8 << 30);
        let no_op = Subject {
            op: None,
            ..base.clone()
        };
        let paired = Subject {
            pairing: Some(crate::evidence::Pairing::BothWays),
            ..base.clone()
        };
        let other = Subject::op_size(CollectiveOp::AllReduce, 4 << 30);
        let subjects = [base.clone(), no_op.clone(), paired.clone(), other.clone()];
        // Every order of metric subjects, every finding subject: the index finds what the
        // search found.
        for metric_subjects in [
            vec![base.clone(), no_op.clone()],
            vec![no_op.clone(), base.clone()],
            vec![paired.clone(), no_op.clone(), other.clone()],
            vec![other.clone()],
            vec![no_op.clone(), paired.clone()],
        ] {
            let mut index: HashMap<(&str, &Subject), usize> = HashMap::new();
            for (i, s) in metric_subjects.iter().enumerate() {
                index.entry(("busbw", s)).or_insert(i);
            }
            for f in &subjects {
                let searched = metric_subjects.iter().position(|m| same_figure(m, f));
                assert_eq!(
                    figure_of(&index, "busbw", f),
                    searched,
                    "{metric_subjects:?} {f:?}"
                );
                assert_eq!(figure_of(&index, "algbw", f), None);
            }
        }
    }

    #[test]
    fn a_folder_whose_name_is_not_a_host_name_is_refused_before_it_is_read() {
        let d = tempfile::tempdir().unwrap();
        for name in ["n1 State=RESUME", "n\u{1b}[31m", "-n"] {
            let p = d.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join(EVIDENCE_FILE), "{}").unwrap();
        }
        let folders = find(&[d.path().to_path_buf()]).unwrap().folders;
        assert_eq!(folders.len(), 3);
        let mut keys = Keys::default();
        for f in &folders {
            let n = read_node(f, &Trust::Untrusted, &mut keys);
            assert_eq!(n.result.verdict, NodeVerdict::Refused, "{:?}", f.name);
            assert!(
                n.result.why[0].contains("not a node name"),
                "{:?}",
                n.result.why
            );
        }
    }

    /// A node's suite digest is of its resolved suite as its evidence holds it, not as this
    /// nodecert would write it again: a field this one writes and the node's nodecert did not
    /// (here: `description`, dropped from the file) does not change it.
    #[test]
    fn a_nodes_suite_digest_is_of_the_suite_as_its_evidence_holds_it() {
        let ev = crate::testutil::simulated_named("h200-vm-1", "n1", 1, &[]);
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("n1");
        std::fs::create_dir(&dir).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&ev.to_json().unwrap()).unwrap();
        let as_loaded = crate::suite::resolved_sha256(&ev.suite.resolved);
        assert_eq!(
            crate::suite::value_sha256(&v["suite"]["resolved"]),
            as_loaded
        );
        v["suite"]["resolved"]
            .as_object_mut()
            .unwrap()
            .remove("description");
        let older = crate::suite::value_sha256(&v["suite"]["resolved"]);
        assert_ne!(older, as_loaded);
        std::fs::write(dir.join(EVIDENCE_FILE), v.to_string()).unwrap();
        let folder = NodeFolder {
            name: "n1".into(),
            path: dir,
        };
        let n = read_node(&folder, &Trust::Untrusted, &mut Keys::default());
        assert_eq!(n.result.verdict, NodeVerdict::Pass, "{:?}", n.result.why);
        assert_eq!(n.suite_sha256.as_deref(), Some(older.as_str()));
    }

    /// Each figure is the node's own value for its own subject (a collective's figures name only
    /// their size, a copy both ways its pair), and only GPU serials and UUIDs that are there
    /// identify a GPU.
    #[test]
    fn a_node_is_summarized_by_its_judged_figures_and_its_gpus() {
        use crate::evidence::Subject;
        let mut ev = crate::testutil::simulated_named("h100-sxm-8", "n1", 1, &[]);
        let mut keys = Keys::default();
        let s = summarize(blank("n1"), &ev, &mut keys);
        let value = |check: &str, metric: &str, subject: &Subject| {
            let c = ev.check(check).unwrap();
            let m = c
                .metrics
                .iter()
                .find(|m| m.name == metric && &m.subject == subject)
                .unwrap();
            let f = s
                .figures
                .iter()
                .find(|f| {
                    f.key.check == check && f.key.metric == metric && &f.key.subject == subject
                })
                .unwrap_or_else(|| panic!("no figure {check} {metric} {subject:?}"));
            (f.value, m.median)
        };
        for (check, metric, subject) in [
            ("p2p_bandwidth", "p2p_read", Subject::pair(0, 5)),
            ("p2p_bandwidth", "p2p_read", Subject::pair(5, 0)),
            ("p2p_bandwidth", "p2p_bidir", Subject::pair(2, 3)),
            ("host_bandwidth", "h2d", Subject::gpu(7)),
            ("collective.all_reduce", "busbw", Subject::size(8 << 30)),
        ] {
            let (got, want) = value(check, metric, &subject);
            assert_eq!(got, want, "{check} {metric} {subject:?}");
        }
        let fig = s
            .figures
            .iter()
            .find(|f| f.key.check == "collective.all_reduce")
            .unwrap();
        assert_eq!(fig.key.limit, Some(460.0));
        assert_eq!(s.gpu_ids.len(), 16);
        // A GPU without a serial (a VM, say) is known by its UUID alone.
        for g in &mut ev.node.gpus {
            g.serial = Some(String::new());
        }
        ev.node.gpus[0].uuid = String::new();
        let s = summarize(blank("n1"), &ev, &mut keys);
        assert_eq!(s.gpu_ids.len(), 7);
        assert!(
            s.gpu_ids.iter().all(|i| i.starts_with("UUID GPU-")),
            "{:?}",
            s.gpu_ids
        );
    }

    /// A node that failed one check and left readings of another unjudged is drained for the
    /// failure: that reason comes first, though the partial check ran before it.
    #[test]
    fn a_failure_is_the_first_reason_before_readings_left_unjudged() {
        let mut ev = crate::testutil::simulated_named(
            "h100-sxm-8",
            "n1",
            1,
            &["slow-gpu-pair:gpu=1,peer=4"],
        );
        let health = ev.checks.iter_mut().find(|c| c.id == "health").unwrap();
        let c = health.coverage.get_or_insert(crate::evidence::Coverage {
            available: 8,
            total: 8,
        });
        c.available = c.total - 1;
        assert!(health.partial());
        let s = summarize(blank("n1"), &ev, &mut Keys::default());
        assert_eq!(s.result.verdict, NodeVerdict::Fail);
        assert!(
            s.result.why[0].starts_with("p2p_bandwidth: "),
            "{:?}",
            s.result.why
        );
        assert!(
            s.result.why.last().unwrap().starts_with("health: "),
            "{:?}",
            s.result.why
        );
    }

    /// A fabric check's warning (a link suspect the node took part in) flags a passing node to
    /// investigate; another check's warning, or a fabric pass, does not; a failing node stays
    /// failed.
    #[test]
    fn only_a_fabric_warning_flags_a_passing_node() {
        let ev = crate::testutil::simulated_named("h100-sxm-8", "n1", 1, &[]);
        let with = |ev: &Evidence, kind: &str, status: Status| {
            let mut ev = ev.clone();
            let mut c = ev.checks[0].clone();
            c.id = "fabric".into();
            c.kind = kind.into();
            c.status = status;
            c.summary = "link n1-n2 suspect".into();
            ev.checks.push(c);
            summarize(blank("n1"), &ev, &mut Keys::default()).result
        };
        let r = with(&ev, "fabric", Status::Warn);
        assert_eq!(r.verdict, NodeVerdict::Flagged);
        assert_eq!(r.why, ["fabric: link n1-n2 suspect"]);
        assert_eq!(with(&ev, "fabric", Status::Pass).verdict, NodeVerdict::Pass);
        let r = with(&ev, "health", Status::Warn);
        assert_eq!((r.verdict, r.why.len()), (NodeVerdict::Pass, 0));
        let failed = crate::testutil::simulated_named(
            "h100-sxm-8",
            "n1",
            1,
            &["slow-gpu-pair:gpu=1,peer=4"],
        );
        let r = with(&failed, "fabric", Status::Warn);
        assert_eq!(r.verdict, NodeVerdict::Fail);
        assert_eq!(r.why.last().unwrap(), "fabric: link n1-n2 suspect");
    }

    #[test]
    fn a_fleet_report_in_the_shared_folder_is_not_a_node_and_the_node_list_is_read() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("n1")).unwrap();
        std::fs::create_dir(d.path().join("fleet")).unwrap();
        std::fs::write(d.path().join("fleet").join(super::super::FLEET_FILE), "{}").unwrap();
        std::fs::write(
            d.path().join(super::super::EXPECTED_FILE),
            "# job: 4242\n# nodes\nn2\n\nn1\n",
        )
        .unwrap();
        std::fs::write(d.path().join("slurm-1.out"), "log").unwrap();
        let found = find(&[d.path().to_path_buf()]).unwrap();
        let names: Vec<&str> = found.folders.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["n1"]);
        assert_eq!(found.expected, ["n1", "n2"]);
        assert_eq!(found.job.as_deref(), Some("4242"));
        assert_eq!(found.suite, None);
        std::fs::write(d.path().join(super::super::EXPECTED_FILE), "n1\nbad name\n").unwrap();
        let e = find(&[d.path().to_path_buf()]).unwrap_err();
        assert!(e.contains(":2: \"bad name\" is not a node name"), "{e}");
    }

    /// The suite the job ran, from its node list's `# suite:` line: read as written, a name no
    /// list can hold refused with its line, and two lists of two suites refused.
    #[test]
    fn the_node_list_names_the_suite_the_job_ran() {
        let d = tempfile::tempdir().unwrap();
        let list = d.path().join(super::super::EXPECTED_FILE);
        std::fs::write(&list, "# job: 7\n# suite: h200 sxm 8\nn1\n").unwrap();
        let found = find(&[d.path().to_path_buf()]).unwrap();
        assert_eq!(found.suite.as_deref(), Some("h200 sxm 8"));
        assert_eq!(found.expected, ["n1"]);
        for (bad, why) in [
            ("# suite:\n", ":1: '' is not a suite name"),
            (
                "n1\n# suite: a\u{7}b\n",
                ":2: 'a\\u{7}b' is not a suite name",
            ),
            (
                "# suite: a\n# suite: b\n",
                ":2: a second suite line names another suite",
            ),
        ] {
            std::fs::write(&list, bad).unwrap();
            let e = find(&[d.path().to_path_buf()]).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let hex = "0123456789abcdef".repeat(4);
        std::fs::write(&list, format!("# suite: a\n# suite-sha256: {hex}\nn1\n")).unwrap();
        let found = find(&[d.path().to_path_buf()]).unwrap();
        assert_eq!(found.suite_sha256.as_deref(), Some(hex.as_str()));
        for (bad, why) in [
            (
                format!("# suite-sha256: {hex}\n"),
                "a suite-sha256 line, but no suite line".to_string(),
            ),
            (
                format!("# suite: a\n# suite-sha256: {}\n", hex.to_uppercase()),
                ":2: '0123456789ABCDEF".to_string(),
            ),
            (
                format!("# suite: a\n# suite-sha256: {}\n", &hex[1..]),
                "is not a SHA-256 (64 lowercase hex digits)".to_string(),
            ),
            (
                format!(
                    "# suite: a\n# suite-sha256: {hex}\n# suite-sha256: {}\n",
                    "f".repeat(64)
                ),
                ":3: a second suite-sha256 line names another digest".to_string(),
            ),
        ] {
            std::fs::write(&list, &bad).unwrap();
            let e = find(&[d.path().to_path_buf()]).unwrap_err();
            assert!(e.contains(&why), "{bad:?}: {e}");
        }
        std::fs::write(&list, "# suite: a\n# suite: a\n").unwrap();
        assert_eq!(
            find(&[d.path().to_path_buf()]).unwrap().suite.as_deref(),
            Some("a")
        );
        let other = tempfile::tempdir().unwrap();
        std::fs::write(
            other.path().join(super::super::EXPECTED_FILE),
            "# suite: b\n",
        )
        .unwrap();
        let e = find(&[d.path().to_path_buf(), other.path().to_path_buf()]).unwrap_err();
        assert!(
            e.contains("suite 'b', but another folder given ran suite 'a'"),
            "{e}"
        );
        // Two folders of one job: the same suite, named twice, is one.
        std::fs::write(
            other.path().join(super::super::EXPECTED_FILE),
            "# suite: a\n",
        )
        .unwrap();
        let both = find(&[d.path().to_path_buf(), other.path().to_path_buf()]).unwrap();
        assert_eq!(both.suite.as_deref(), Some("a"));
        // And with digests: one digest twice is one, two are two jobs.
        let with = |hex: &str| format!("# suite: a\n# suite-sha256: {hex}\n");
        std::fs::write(&list, with(&hex)).unwrap();
        std::fs::write(other.path().join(super::super::EXPECTED_FILE), with(&hex)).unwrap();
        let both = find(&[d.path().to_path_buf(), other.path().to_path_buf()]).unwrap();
        assert_eq!(both.suite_sha256.as_deref(), Some(hex.as_str()));
        std::fs::write(
            other.path().join(super::super::EXPECTED_FILE),
            with(&"f".repeat(64)),
        )
        .unwrap();
        let e = find(&[d.path().to_path_buf(), other.path().to_path_buf()]).unwrap_err();
        assert!(
            e.contains("but another folder given ran a suite of SHA-256"),
            "{e}"
        );
        assert!(check_suite_name(&"x".repeat(MAX_SUITE_NAME)).is_ok());
        assert!(check_suite_name(&"x".repeat(MAX_SUITE_NAME + 1)).is_err());
        assert!(check_suite_name(" a").is_err());
    }
}
