//! Fleets: many nodes' evidence judged together (`nodecert fleet ...`).
//!
//! Each node is judged by its own suite first ([`crate::evidence::Evidence::assess`]); the fleet
//! adds what one node cannot see: a node that left no evidence, evidence copied from another
//! node, a signature that does not verify, and a node within its floors but well below its
//! siblings ([`judge`]). Nodes are read one at a time and only a summary of each is kept
//! ([`gather`]), so a fleet of thousands is read in the memory of a few nodes' figures.
//!
//! Dispatch stays with the schedulers users already run: [`slurm`] writes an sbatch script and
//! drains nodes with `scontrol`, [`k8s`] writes an Indexed Job and taints nodes. nodecert never
//! queues or schedules anything itself.

pub mod baseline;
pub mod chart;
pub mod export;
pub mod gather;
pub mod hostlist;
pub mod judge;
pub mod k8s;
pub mod render;
pub mod simulate;
pub mod slurm;

use crate::evidence::{JobRecord, Status, Subject, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The fleet's evidence file in the output folder.
pub const FLEET_FILE: &str = "fleet.json";
/// The files `fleet report` writes into its folder (and a signature lists).
pub const FILES: [&str; 5] = [
    FLEET_FILE,
    "fleet.html",
    "fleet.md",
    "fleet-junit.xml",
    "fleet.prom",
];
/// What `fleet.json` is, and its version (checked on read).
pub const FORMAT: &str = "nodecert-fleet";
/// The newest version: 2 may hold the verdict "partial". A report without one is still
/// written as version 1, which every nodecert that reads fleet.json reads; one with a partial
/// node is version 2, so that a reader that knows only version 1 refuses it by its version
/// rather than misreading or tripping over a verdict it never heard of.
pub const FORMAT_VERSION: u32 = 2;
/// The version of a report none of whose nodes is partial.
pub const FORMAT_VERSION_BEFORE_PARTIAL: u32 = 1;

/// The version a report of these nodes, and this fleet verdict, is written as (see
/// [`FORMAT_VERSION`]): a node's own verdict counts as much as the fleet's word for it (a
/// partial node that was then refused still says "partial" as its `own_verdict`).
pub fn format_version_for(nodes: &[NodeResult], verdict: NodeVerdict) -> u32 {
    let partial = verdict == NodeVerdict::Partial
        || nodes
            .iter()
            .any(|n| n.verdict == NodeVerdict::Partial || n.own_verdict == Some(Verdict::Partial));
    if partial {
        FORMAT_VERSION
    } else {
        FORMAT_VERSION_BEFORE_PARTIAL
    }
}

/// The file a fleet job writes into its shared folder: the nodes it was given, one per line.
/// `fleet report` expects evidence from each; a node without any is "not tested".
pub const EXPECTED_FILE: &str = "expected-nodes.txt";
/// How far below the fleet's median a figure may be before its node is flagged, percent.
pub const DEFAULT_OUTLIER_PCT: f64 = 10.0;
/// The fewest nodes whose figures make a median worth comparing with.
pub const MIN_NODES_FOR_OUTLIERS: usize = 5;

/// What the fleet says of one node, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeVerdict {
    /// Its own verdict is pass, and no figure is far below its siblings'.
    Pass,
    /// Its own verdict is pass, but a figure is more than the outlier margin below the fleet's
    /// median: slower than its siblings though within its floors.
    Flagged,
    /// Every judgement it made held, but readings its suite needed were not available there:
    /// those judgements were never made.
    Partial,
    /// It ran, but judged nothing.
    NothingJudged,
    /// Its run did not finish.
    Incomplete,
    /// Expected (in the job's node list), but it left no evidence.
    NotTested,
    /// A measurement failed there: it could not be tested.
    Error,
    /// A judgement of its own suite did not hold.
    Fail,
    /// Its evidence cannot be accepted: unreadable, forged, copied from another node (a GPU
    /// another node reports too), or a signature that does not verify.
    Refused,
}

impl NodeVerdict {
    /// Whether the verdict says part of the fleet was never judged (a node not tested, a run
    /// that did not finish, nothing judged): a signature would certify what was never checked.
    pub fn is_shortfall(self) -> bool {
        matches!(
            self,
            NodeVerdict::NothingJudged | NodeVerdict::Incomplete | NodeVerdict::NotTested
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            NodeVerdict::Pass => "PASS",
            NodeVerdict::Flagged => "FLAGGED",
            NodeVerdict::Partial => "PARTIAL",
            NodeVerdict::NothingJudged => "NOTHING JUDGED",
            NodeVerdict::Incomplete => "INCOMPLETE",
            NodeVerdict::NotTested => "NOT TESTED",
            NodeVerdict::Error => "ERROR",
            NodeVerdict::Fail => "FAIL",
            NodeVerdict::Refused => "REFUSED",
        }
    }

    /// A stable key, as serde writes it.
    pub fn key(self) -> &'static str {
        match self {
            NodeVerdict::Pass => "pass",
            NodeVerdict::Flagged => "flagged",
            NodeVerdict::Partial => "partial",
            NodeVerdict::NothingJudged => "nothing_judged",
            NodeVerdict::Incomplete => "incomplete",
            NodeVerdict::NotTested => "not_tested",
            NodeVerdict::Error => "error",
            NodeVerdict::Fail => "fail",
            NodeVerdict::Refused => "refused",
        }
    }

    pub const ALL: [NodeVerdict; 9] = [
        NodeVerdict::Pass,
        NodeVerdict::Flagged,
        NodeVerdict::Partial,
        NodeVerdict::NothingJudged,
        NodeVerdict::Incomplete,
        NodeVerdict::NotTested,
        NodeVerdict::Error,
        NodeVerdict::Fail,
        NodeVerdict::Refused,
    ];

    /// The node's own verdict, before the fleet's rules.
    pub fn of(v: Verdict) -> NodeVerdict {
        match v {
            Verdict::Pass => NodeVerdict::Pass,
            Verdict::Fail => NodeVerdict::Fail,
            Verdict::Error => NodeVerdict::Error,
            Verdict::Incomplete => NodeVerdict::Incomplete,
            Verdict::NothingJudged => NodeVerdict::NothingJudged,
            Verdict::Partial => NodeVerdict::Partial,
        }
    }

    /// The exit code of a fleet whose worst node has this verdict: those of `run`, with a
    /// node not tested counted as an unfinished run and refused evidence as invalid input. A
    /// flagged node is a finding to look at, not a failure: 0.
    pub fn exit_code(self) -> u8 {
        use crate::error::exit;
        match self {
            NodeVerdict::Pass | NodeVerdict::Flagged => exit::PASS,
            NodeVerdict::Fail => exit::CHECK_FAILED,
            NodeVerdict::Error => exit::NODE_UNTESTABLE,
            NodeVerdict::Incomplete | NodeVerdict::NotTested => exit::INCOMPLETE,
            NodeVerdict::NothingJudged => exit::NOTHING_JUDGED,
            NodeVerdict::Partial => exit::PARTIAL,
            NodeVerdict::Refused => exit::INVALID_INPUT,
        }
    }

    /// Whether a node with this verdict should be taken out of service (drained or tainted).
    pub fn drains(self) -> bool {
        matches!(
            self,
            NodeVerdict::Fail | NodeVerdict::Error | NodeVerdict::Refused
        )
    }
}

/// Whether a node's report folder was signed, and what checking it showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SignatureState {
    /// No manifest: the folder is not signed.
    Unsigned,
    /// Verified against the trusted signers given (`--allowed-signers` or `--pubkey`).
    Verified { signers: Vec<String> },
    /// No trusted signer was given: the files match their manifest and the signatures are
    /// valid for their own keys, but who signed is not checked.
    Intact,
    /// Verification failed: the node's evidence is refused.
    Failed { problems: Vec<String> },
}

/// How a node's own certificate (its signed report folder) stood when the fleet read it. A
/// fleet's signature seals what its report read: it vouches for a node's certificate only where
/// that certificate was verified against a trusted signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CertificateCheck {
    /// Verified against a trusted signer (`--pubkey` or `--allowed-signers`).
    Verified,
    /// Its digests and signatures hold, but no trusted signer was given: who signed is not
    /// checked.
    SignerNotChecked,
    /// Its folder is not signed (or was refused before its signature was read).
    Unsigned,
    /// Its signature or digests did not verify: the node is refused.
    Failed,
    /// The node left no report of this run to verify: it is not tested.
    NoReport,
}

impl CertificateCheck {
    /// The states a fleet's signature does not vouch for, in the order they are named.
    pub const NOT_VERIFIED: [CertificateCheck; 4] = [
        CertificateCheck::Unsigned,
        CertificateCheck::SignerNotChecked,
        CertificateCheck::Failed,
        CertificateCheck::NoReport,
    ];

    /// How the fleet found node `n`'s certificate. A node not tested has no report of this run,
    /// whatever an older report in its folder was signed with.
    pub fn of(n: &NodeResult) -> CertificateCheck {
        if n.verdict == NodeVerdict::NotTested {
            return CertificateCheck::NoReport;
        }
        match n.signature {
            SignatureState::Verified { .. } => CertificateCheck::Verified,
            SignatureState::Intact => CertificateCheck::SignerNotChecked,
            SignatureState::Unsigned => CertificateCheck::Unsigned,
            SignatureState::Failed { .. } => CertificateCheck::Failed,
        }
    }

    /// In words, as the pages and the console name it.
    pub fn words(self) -> &'static str {
        match self {
            CertificateCheck::Verified => "verified",
            CertificateCheck::SignerNotChecked => "intact, signer not checked",
            CertificateCheck::Unsigned => "unsigned",
            CertificateCheck::Failed => "signature failed",
            CertificateCheck::NoReport => "no report",
        }
    }
}

/// How many of the fleet's nodes had their own certificates verified against trusted signers
/// when the report was made, and how the others stood ([`CertificateCheck`]). A signature on
/// the fleet seals what its report read, not each node's hardware certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Certificates {
    /// Every node of the fleet: what the other counts add up to.
    pub nodes: usize,
    /// Signed reports verified against a trusted signer (`--pubkey` or `--allowed-signers`).
    pub verified: usize,
    /// Signed reports whose digests and signatures hold but whose signer was not checked (no
    /// trusted signer was given).
    pub signer_not_checked: usize,
    /// Report folders that are not signed (or were refused before their signature was read).
    pub unsigned: usize,
    /// Signed reports whose signature or digests did not verify (those nodes are refused).
    pub failed: usize,
    /// Nodes with no report of this run to verify (not tested).
    pub no_report: usize,
}

impl Certificates {
    /// The counts of `nodes`.
    pub fn of(nodes: &[NodeResult]) -> Certificates {
        let mut c = Certificates {
            nodes: nodes.len(),
            ..Default::default()
        };
        for n in nodes {
            *match CertificateCheck::of(n) {
                CertificateCheck::Verified => &mut c.verified,
                CertificateCheck::SignerNotChecked => &mut c.signer_not_checked,
                CertificateCheck::Unsigned => &mut c.unsigned,
                CertificateCheck::Failed => &mut c.failed,
                CertificateCheck::NoReport => &mut c.no_report,
            } += 1;
        }
        c
    }

    /// "3 verified, 1 unsigned of 4": the counts that are not zero.
    pub fn text(&self) -> String {
        let parts: Vec<String> = [
            (self.verified, "verified"),
            (self.signer_not_checked, "signer not checked"),
            (self.unsigned, "unsigned"),
            (self.failed, "signature failed"),
            (self.no_report, "no report"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, s)| format!("{n} {s}"))
        .collect();
        format!("{} of {}", parts.join(", "), self.nodes)
    }
}

/// The most nodes a signature's scope names for each state; the rest are counted.
pub const MAX_NAMES_SHOWN: usize = 20;

/// What a figure is, shared by every node that measured it: interned once per fleet
/// ([`gather::Keys`]), so that each node keeps only its values.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureKey {
    /// Its number in the fleet's table of figures (equal keys, equal ids).
    pub id: u32,
    /// The check's id ("p2p_bandwidth").
    pub check: String,
    /// The metric ("p2p_read").
    pub metric: String,
    pub subject: Subject,
    pub unit: String,
    /// Higher is better (a bandwidth), or lower (a latency).
    pub higher_is_better: bool,
    /// The suite's floor (or ceiling, for a latency) of this figure, when it has one.
    pub limit: Option<f64>,
    /// The conditions its check measured under ([`crate::diff::conditions`]: what the GEMMs
    /// multiplied, the NCCL settings), "" when none was recorded: nodes measured under other
    /// conditions measured other things, and are not compared with each other.
    pub conditions: String,
}

/// One figure of a node that its own suite judged against a limit: what the fleet compares.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub key: std::sync::Arc<FigureKey>,
    /// The node's median.
    pub value: f64,
    /// How the node's own suite judged it.
    pub status: Status,
}

/// A node's figure more than the outlier margin worse than the fleet's median of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlier {
    pub node: String,
    pub check: String,
    pub metric: String,
    pub subject: Subject,
    /// The subject in words ("GPU 0 -> GPU 5").
    pub subject_text: String,
    pub unit: String,
    pub value: f64,
    /// The median of the same figure over the nodes compared.
    pub fleet_median: f64,
    /// How much worse than that median, percent.
    pub worse_pct: f64,
    /// How many nodes' figures the median is of (same suite, GPU model, figure).
    pub nodes_compared: usize,
}

/// One node as the fleet judged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// The node's name: its folder's name (the scheduler's node name).
    pub name: String,
    /// The folder read, as given.
    pub folder: String,
    pub verdict: NodeVerdict,
    /// The node's own verdict, from its evidence (absent when there is none to read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_verdict: Option<Verdict>,
    /// Why the verdict is what it is, one line each: the checks that failed, the refusal, the
    /// figures far below the fleet's.
    pub why: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// "8x NVIDIA H100 80GB HBM3".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    /// The GPU model compared with (the first GPU's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    pub simulated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobRecord>,
    /// Each check's status, by check id (the report's node x check grid).
    pub checks: BTreeMap<String, Status>,
    /// The checks whose status is fail or error: what a drain reason names.
    pub failed_checks: Vec<String>,
    pub signature: SignatureState,
    /// A folder of a node not in the job's node list (any node of the job can write the job's
    /// folder): shown, but never drained, tainted or resumed by `fleet drain`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unlisted: bool,
    /// Failed only for the fabric as a whole (no node at fault, none passing across it): its
    /// certificate fails, but `fleet drain` does not take it out of service for that alone
    /// (single-node work runs as well as ever; the fabric is what to fix).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fabric_wide_only: bool,
}

/// A figure across the fleet: one point per node, for the report's strip charts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// The suite the nodes ran: figures of different suites are not one distribution.
    pub suite: String,
    pub check: String,
    /// The metric, with its size for a collective ("busbw 8 GiB").
    pub metric: String,
    /// The metric's own name ("busbw").
    pub figure: String,
    /// The subject class the points share: a collective's size, or the node.
    pub class: Subject,
    pub unit: String,
    pub higher_is_better: bool,
    /// The suite's floor (or ceiling), when every node shares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// The conditions its nodes measured under (see [`FigureKey::conditions`]); nodes of one
    /// suite measured under other conditions make a distribution of their own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub conditions: String,
    pub median: f64,
    /// (node, the node's worst value of this figure over its subjects), by node name.
    pub points: Vec<(String, f64)>,
}

impl Distribution {
    /// "busbw 8 GiB", with the conditions its nodes measured under where any were recorded:
    /// "busbw 8 GiB, nccl_env: NCCL_ALGO=Ring".
    pub fn label(&self) -> String {
        if self.conditions.is_empty() {
            self.metric.clone()
        } else {
            format!("{}, {}", self.metric, self.conditions)
        }
    }
}

/// What to do about a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub node: String,
    /// "drain" (take it out of service), "rerun" (test it again) or "investigate" (in service,
    /// but slower than its siblings).
    pub action: String,
    pub reason: String,
}

/// Everything `fleet report` found: `fleet.json`, rendered into the fleet's pages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub format: String,
    pub format_version: u32,
    pub nodecert_version: String,
    /// Some node's results are simulated: the whole report says so.
    pub simulated: bool,
    pub verdict: NodeVerdict,
    /// How many nodes have each verdict, by key.
    pub counts: BTreeMap<String, usize>,
    /// How many nodes' own certificates were verified against trusted signers, and how the
    /// others stood. Absent in a fleet.json written before nodecert counted them (the counts
    /// are then taken from `nodes`); when present, they must agree with `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<Certificates>,
    /// The outlier margin used, percent.
    pub outlier_pct: f64,
    /// The nodes the job was given (empty when no list was found or given).
    pub expected: Vec<String>,
    /// The scheduler's job whose nodes these are (from its node list), when known: evidence of
    /// another job is not this job's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The suite every node was held to, by name (from the node list's `# suite:` line, or
    /// `--suite`), when known: a node that ran another is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// The digest of that suite as the job's nodes run it (the node list's `# suite-sha256:`
    /// line, written when the job started), when known: a node whose evidence says it ran
    /// other contents under the suite's name is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite_sha256: Option<String>,
    /// Check ids in the order of the grid's columns.
    pub columns: Vec<String>,
    pub nodes: Vec<NodeResult>,
    pub outliers: Vec<Outlier>,
    pub distributions: Vec<Distribution>,
    pub actions: Vec<Action>,
}

impl FleetReport {
    /// "12 pass, 1 flagged, 2 fail": the counts in the order of the verdicts.
    pub fn counts_text(&self) -> String {
        NodeVerdict::ALL
            .iter()
            .filter_map(|v| {
                self.counts
                    .get(v.key())
                    .map(|n| format!("{n} {}", v.label().to_lowercase()))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn node(&self, name: &str) -> Option<&NodeResult> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// What a signature on this fleet vouches for, in plain words: it seals what the report
    /// read; how many node certificates were verified against trusted signers; and the nodes
    /// whose certificates were not, by state (at most [`MAX_NAMES_SHOWN`] named per state).
    /// Counted from `nodes`, as [`FleetReport::read`] checks `certificates` against them. Node
    /// names are as given: escape them for where the sentence goes.
    pub fn signature_scope(&self) -> String {
        let c = Certificates::of(&self.nodes);
        let mut s = String::from("This signature seals what the fleet report read. ");
        let noun = if c.nodes == 1 {
            "node certificate"
        } else {
            "node certificates"
        };
        if c.nodes > 0 && c.verified == c.nodes {
            s.push_str(&format!(
                "All {} {noun} {} verified against trusted signers.",
                c.nodes,
                if c.nodes == 1 { "was" } else { "were" }
            ));
            return s;
        }
        s.push_str(&format!(
            "{} of {} {noun} {} verified against trusted signers",
            c.verified,
            c.nodes,
            if c.verified == 1 { "was" } else { "were" }
        ));
        let mut groups = Vec::new();
        for state in CertificateCheck::NOT_VERIFIED {
            let names: Vec<&str> = self
                .nodes
                .iter()
                .filter(|n| CertificateCheck::of(n) == state)
                .map(|n| n.name.as_str())
                .collect();
            if names.is_empty() {
                continue;
            }
            let mut text = names
                .iter()
                .take(MAX_NAMES_SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if names.len() > MAX_NAMES_SHOWN {
                text.push_str(&format!(" and {} more", names.len() - MAX_NAMES_SHOWN));
            }
            groups.push(format!("{text} ({})", state.words()));
        }
        if !groups.is_empty() {
            s.push_str("; not verified, so not vouched for by this signature: ");
            s.push_str(&groups.join("; "));
        }
        s.push('.');
        s
    }

    /// Read `fleet.json` (or a folder holding one), bounded, checking its format.
    pub fn read(path: &std::path::Path) -> Result<FleetReport, String> {
        Self::load(path).map(|(r, _)| r)
    }

    /// [`FleetReport::read`], with the text read: what a signature's digest is of.
    pub fn load(path: &std::path::Path) -> Result<(FleetReport, String), String> {
        let path = if path.is_dir() {
            path.join(FLEET_FILE)
        } else {
            path.to_path_buf()
        };
        let text = read_text(&path)?;
        Self::from_text(&path, text)
    }

    /// [`FleetReport::load`] of a text already read from `path` (as `verify` reads a signed
    /// one: without following a link, and held to the digest the manifest names).
    pub fn from_text(
        path: &std::path::Path,
        text: String,
    ) -> Result<(FleetReport, String), String> {
        // The format first, from the same text (its other fields skipped, not built): a file of
        // another format or version is named as such, not as a missing field.
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            format: serde_json::Value,
            #[serde(default)]
            format_version: serde_json::Value,
        }
        let head: Head = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
        let format = head.format.as_str().unwrap_or_default();
        let version = head.format_version.as_u64();
        let known = u64::from(FORMAT_VERSION_BEFORE_PARTIAL)..=u64::from(FORMAT_VERSION);
        if format != FORMAT || !version.is_some_and(|v| known.contains(&v)) {
            return Err(format!(
                "{}: not a {FORMAT} file of version {FORMAT_VERSION_BEFORE_PARTIAL} to {FORMAT_VERSION} (format {format:?}, version {})",
                path.display(),
                version.map(|v| v.to_string()).unwrap_or_else(|| "none".into())
            ));
        }
        // Names are not trusted here: the drain plans pass only host names to scontrol and
        // kubectl, whatever the file says.
        let r: FleetReport =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // A version-1 file may hold "partial": development builds of 2026-12-03 wrote such
        // files, and this nodecert knows the word. It writes them as version 2.
        // A file written before nodes were marked unlisted: those its node list leaves out
        // are, as `fleet report` marks them now.
        let mut r = r;
        if !r.expected.is_empty() {
            for n in &mut r.nodes {
                if !r.expected.contains(&n.name) {
                    n.unlisted = true;
                }
            }
        }
        // The fleet's verdict is its worst node's, and its counts are its nodes': a file edited
        // to say PASS over a failed node would reach the sealed pages, JUnit and Prometheus
        // files, and `fleet drain`.
        let (worst, counts) = verdict_and_counts(&r.nodes);
        if r.verdict != worst || r.counts != counts {
            return Err(format!(
                "{}: its verdict ({}) or counts disagree with its nodes' (worst: {}); refusing a \
                 file whose records disagree",
                path.display(),
                r.verdict.label(),
                worst.label()
            ));
        }
        // The counts a signature's pages state must be those of the nodes the file holds.
        if let Some(c) = r.certificates {
            let nodes = Certificates::of(&r.nodes);
            if c != nodes {
                return Err(format!(
                    "{}: its certificate counts ({}) disagree with its nodes' signatures ({}); \
                     refusing a file whose records disagree",
                    path.display(),
                    c.text(),
                    nodes.text()
                ));
            }
        }
        Ok((r, text))
    }
}

/// A fleet's verdict (its worst node's; not tested where it has none) and how many of its
/// nodes have each verdict, by key: what `fleet report` writes, and what a fleet.json read must
/// state.
pub fn verdict_and_counts(nodes: &[NodeResult]) -> (NodeVerdict, BTreeMap<String, usize>) {
    let verdict = nodes
        .iter()
        .map(|n| n.verdict)
        .max()
        .unwrap_or(NodeVerdict::NotTested);
    let mut counts = BTreeMap::new();
    for n in nodes {
        *counts.entry(n.verdict.key().to_string()).or_insert(0) += 1;
    }
    (verdict, counts)
}

/// fleet.json's text, bounded ([`crate::fsio::read::Kind::Fleet`]).
fn read_text(path: &std::path::Path) -> Result<String, String> {
    crate::fsio::read::read_to_string(path, crate::fsio::read::Kind::Fleet)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Whether the fleet report at `path` (fleet.json) is of simulated nodes, as a signature
/// records it: its top-level flag, which must be a boolean and agree with its nodes' (a fleet
/// is simulated when any of its nodes is), so that editing one field cannot make simulated
/// figures a certification of hardware.
pub fn simulated_status(path: &std::path::Path) -> Result<bool, String> {
    simulated_status_of(read_text(path)?.as_bytes())
}

/// [`simulated_status`] of the bytes of a fleet.json already read.
pub fn simulated_status_of(bytes: &[u8]) -> Result<bool, String> {
    #[derive(Deserialize)]
    struct Node {
        #[serde(default)]
        name: serde_json::Value,
        simulated: bool,
    }
    #[derive(Deserialize)]
    struct Flags {
        simulated: Option<serde_json::Value>,
        #[serde(default)]
        nodes: Vec<Node>,
    }
    let f: Flags = serde_json::from_slice(bytes).map_err(|e| format!("not a fleet report: {e}"))?;
    let top = match f.simulated {
        Some(serde_json::Value::Bool(b)) => b,
        Some(_) => return Err("top-level \"simulated\" is not a boolean".into()),
        None => return Err("has no top-level \"simulated\"".into()),
    };
    match f.nodes.iter().find(|n| n.simulated) {
        Some(n) if !top => Err(format!(
            "says simulated: false, but its node {} is simulated; refusing a file whose records disagree",
            crate::console::visible(&n.name.to_string())
        )),
        None if top => Err(
            "says simulated: true, but none of its nodes is; refusing a file whose records disagree"
                .into(),
        ),
        _ => Ok(top),
    }
}

/// Names in natural order: "n2" before "n10".
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let b = s.as_bytes();
        for i in 1..=b.len() {
            if i == b.len() || b[i].is_ascii_digit() != b[start].is_ascii_digit() {
                out.push((b[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(&pb) {
        let o = match (x, y) {
            ((true, x), (true, y)) => {
                let (tx, ty) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                tx.len()
                    .cmp(&ty.len())
                    .then(tx.cmp(ty))
                    .then(x.len().cmp(&y.len()))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if o.is_ne() {
            return o;
        }
    }
    pa.len().cmp(&pb.len()).then(a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_is_simulated_exactly_when_one_of_its_nodes_is() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FLEET_FILE);
        let status = |text: &str| {
            std::fs::write(&p, text).unwrap();
            simulated_status(&p)
        };
        let node = |sim: bool| format!(r#"{{"name": "n1", "simulated": {sim}}}"#);
        let fleet = |top: &str, nodes: &[String]| {
            format!(r#"{{"simulated": {top}, "nodes": [{}]}}"#, nodes.join(","))
        };
        assert_eq!(status(&fleet("true", &[node(true), node(false)])), Ok(true));
        assert_eq!(
            status(&fleet("false", &[node(false), node(false)])),
            Ok(false)
        );
        assert_eq!(status(&fleet("false", &[])), Ok(false));
        let e = status(&fleet("false", &[node(false), node(true)])).unwrap_err();
        assert!(e.contains("node \"n1\" is simulated"), "{e}");
        let e = status(&fleet("true", &[node(false)])).unwrap_err();
        assert!(e.contains("none of its nodes is"), "{e}");
        assert!(status(&fleet("true", &[])).is_err());
        assert!(status(&fleet("\"yes\"", &[node(true)])).is_err());
        assert!(status(r#"{"nodes": []}"#)
            .unwrap_err()
            .contains("no top-level"));
        assert!(status("[1]").is_err());
        assert!(status(r#"{"simulated": true, "nodes": [{"name": "x"}]}"#).is_err());
    }

    /// A fleet of nodes named for how their certificates stood.
    fn certified(states: &[(&str, SignatureState, NodeVerdict)]) -> FleetReport {
        let mut r = judge::judge(Vec::new(), &[], 10.0);
        r.nodes = states
            .iter()
            .map(|(name, sig, verdict)| {
                let mut n = gather::blank(name);
                n.signature = sig.clone();
                n.verdict = *verdict;
                n
            })
            .collect();
        r.certificates = Some(Certificates::of(&r.nodes));
        (r.verdict, r.counts) = verdict_and_counts(&r.nodes);
        r
    }

    fn verified() -> SignatureState {
        SignatureState::Verified {
            signers: vec!["ops@example.com".into()],
        }
    }

    #[test]
    fn each_node_certificate_is_counted_by_how_it_stood_and_a_node_not_tested_has_none() {
        use NodeVerdict::{NotTested, Pass, Refused};
        let failed = SignatureState::Failed {
            problems: vec!["x".into()],
        };
        let r = certified(&[
            ("v1", verified(), Pass),
            ("v2", verified(), Refused),
            ("i1", SignatureState::Intact, Pass),
            ("u1", SignatureState::Unsigned, Pass),
            ("u2", SignatureState::Unsigned, Refused),
            ("f1", failed, Refused),
            // Evidence of an earlier job, verified then, is no report of this one.
            ("t1", verified(), NotTested),
            ("t2", SignatureState::Unsigned, NotTested),
        ]);
        let states: Vec<CertificateCheck> = r.nodes.iter().map(CertificateCheck::of).collect();
        use CertificateCheck as C;
        assert_eq!(
            states,
            [
                C::Verified,
                C::Verified,
                C::SignerNotChecked,
                C::Unsigned,
                C::Unsigned,
                C::Failed,
                C::NoReport,
                C::NoReport
            ]
        );
        let c = Certificates::of(&r.nodes);
        assert_eq!(
            c,
            Certificates {
                nodes: 8,
                verified: 2,
                signer_not_checked: 1,
                unsigned: 2,
                failed: 1,
                no_report: 2,
            }
        );
        assert_eq!(
            c.text(),
            "2 verified, 1 signer not checked, 2 unsigned, 1 signature failed, 2 no report of 8"
        );
    }

    #[test]
    fn a_signatures_scope_says_how_many_node_certificates_were_verified_and_names_the_others() {
        use NodeVerdict::{NotTested, Pass, Refused};
        let r = certified(&[
            ("n1", verified(), Pass),
            ("n2", verified(), Pass),
            ("n3", SignatureState::Unsigned, Pass),
            ("n4", SignatureState::Intact, Pass),
            ("n5", SignatureState::Unsigned, Pass),
            (
                "n6",
                SignatureState::Failed {
                    problems: vec!["bad".into()],
                },
                Refused,
            ),
            ("n7", SignatureState::Unsigned, NotTested),
        ]);
        assert_eq!(
            r.signature_scope(),
            "This signature seals what the fleet report read. 2 of 7 node certificates were \
             verified against trusted signers; not verified, so not vouched for by this \
             signature: n3, n5 (unsigned); n4 (intact, signer not checked); n6 (signature \
             failed); n7 (no report)."
        );
        let r = certified(&[
            ("n1", verified(), Pass),
            ("n2", SignatureState::Unsigned, Pass),
        ]);
        assert_eq!(
            r.signature_scope(),
            "This signature seals what the fleet report read. 1 of 2 node certificates was \
             verified against trusted signers; not verified, so not vouched for by this \
             signature: n2 (unsigned)."
        );
        let r = certified(&[("n1", verified(), Pass), ("n2", verified(), Pass)]);
        assert_eq!(
            r.signature_scope(),
            "This signature seals what the fleet report read. All 2 node certificates were \
             verified against trusted signers."
        );
        let r = certified(&[("n1", verified(), Pass)]);
        assert!(
            r.signature_scope()
                .ends_with(" All 1 node certificate was verified against trusted signers."),
            "{}",
            r.signature_scope()
        );
        let r = certified(&[("n1", SignatureState::Intact, Pass)]);
        assert!(
            r.signature_scope().ends_with(
                " 0 of 1 node certificate were verified against trusted signers; not verified, \
                 so not vouched for by this signature: n1 (intact, signer not checked)."
            ),
            "{}",
            r.signature_scope()
        );
        // No node at all: nothing was verified, and nothing is named.
        let r = certified(&[]);
        assert_eq!(
            r.signature_scope(),
            "This signature seals what the fleet report read. 0 of 0 node certificates were \
             verified against trusted signers."
        );
    }

    #[test]
    fn a_large_fleets_scope_names_some_nodes_of_each_state_and_counts_the_rest() {
        let names: Vec<String> = (1..=MAX_NAMES_SHOWN + 3).map(|i| format!("u{i}")).collect();
        let mut states: Vec<(&str, SignatureState, NodeVerdict)> = names
            .iter()
            .map(|n| (n.as_str(), SignatureState::Unsigned, NodeVerdict::Pass))
            .collect();
        states.push(("v1", verified(), NodeVerdict::Pass));
        let exactly: Vec<String> = (1..=MAX_NAMES_SHOWN).map(|i| format!("i{i}")).collect();
        for n in &exactly {
            states.push((n.as_str(), SignatureState::Intact, NodeVerdict::Pass));
        }
        let s = certified(&states).signature_scope();
        let shown = names[..MAX_NAMES_SHOWN].join(", ");
        assert!(
            s.contains(&format!(": {shown} and 3 more (unsigned); ")),
            "{s}"
        );
        assert!(!s.contains(&format!("u{},", MAX_NAMES_SHOWN + 1)), "{s}");
        // Exactly as many as are shown: all named, none counted.
        assert!(
            s.ends_with(&format!(
                "; {} (intact, signer not checked).",
                exactly.join(", ")
            )),
            "{s}"
        );
        assert!(
            s.contains(&format!(" 1 of {} node", 2 * MAX_NAMES_SHOWN + 4)),
            "{s}"
        );
    }

    #[test]
    fn certificate_counts_are_optional_in_fleet_json_but_must_agree_with_its_nodes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FLEET_FILE);
        let r = certified(&[
            ("n1", verified(), NodeVerdict::Pass),
            ("n2", SignatureState::Unsigned, NodeVerdict::Pass),
        ]);
        let write = |v: &serde_json::Value| {
            std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["certificates"]["verified"], 1);
        assert_eq!(json["certificates"]["unsigned"], 1);
        assert_eq!(json["certificates"]["nodes"], 2);
        write(&json);
        let (read, text) = FleetReport::load(d.path()).unwrap();
        assert_eq!(read, r);
        assert_eq!(text, std::fs::read_to_string(&p).unwrap());
        // A fleet.json written before the counts: it loads, and the counts come from its nodes.
        let mut old = json.clone();
        old.as_object_mut().unwrap().remove("certificates");
        write(&old);
        let read = FleetReport::read(&p).unwrap();
        assert_eq!(read.certificates, None);
        assert!(read.signature_scope().contains(" 1 of 2 "));
        // Counts edited to say more was verified than the nodes say: refused.
        let mut edited = json.clone();
        edited["certificates"]["verified"] = 2.into();
        edited["certificates"]["unsigned"] = 0.into();
        write(&edited);
        let e = FleetReport::read(&p).unwrap_err();
        assert!(
            e.contains("its certificate counts (2 verified of 2) disagree with its nodes' signatures (1 verified, 1 unsigned of 2)"),
            "{e}"
        );
        let mut edited = json.clone();
        edited["certificates"]["nodes"] = 3.into();
        write(&edited);
        assert!(FleetReport::read(&p).is_err());
        // A verdict, or counts, edited away from what the nodes say: refused.
        let r = certified(&[
            ("n1", verified(), NodeVerdict::Pass),
            ("n2", verified(), NodeVerdict::Fail),
        ]);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["verdict"], "fail");
        write(&json);
        assert!(FleetReport::read(&p).is_ok());
        let mut edited = json.clone();
        edited["verdict"] = "pass".into();
        write(&edited);
        let e = FleetReport::read(&p).unwrap_err();
        assert!(
            e.contains("its verdict (PASS) or counts disagree with its nodes' (worst: FAIL)"),
            "{e}"
        );
        let mut edited = json.clone();
        edited["counts"]["fail"] = 0.into();
        edited["counts"]["pass"] = 2.into();
        write(&edited);
        assert!(FleetReport::read(&p).is_err());
        // A file written before nodes were marked unlisted: the node its list leaves out is
        // read as unlisted (fleet drain then leaves it alone).
        let mut old = json;
        old["expected"] = serde_json::json!(["n1"]);
        write(&old);
        let read = FleetReport::read(&p).unwrap();
        assert!(!read.nodes[0].unlisted);
        assert!(read.nodes[1].unlisted);
    }

    #[test]
    fn a_partial_fleet_reads_as_version_2_and_as_version_1_and_other_versions_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FLEET_FILE);
        let write = |v: &serde_json::Value| {
            std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
        };
        let mut r = certified(&[
            ("n1", SignatureState::Unsigned, NodeVerdict::Pass),
            ("n2", SignatureState::Unsigned, NodeVerdict::Partial),
        ]);
        r.verdict = NodeVerdict::Partial;
        r.format_version = 2;
        let json = serde_json::to_value(&r).unwrap();
        write(&json);
        assert_eq!(FleetReport::read(&p).unwrap(), r);
        // The same nodes as version 1 (development builds wrote such files): read.
        let mut v1 = json.clone();
        v1["format_version"] = 1.into();
        write(&v1);
        assert_eq!(
            FleetReport::read(&p).unwrap().nodes[1].verdict,
            NodeVerdict::Partial
        );
        // Versions 0 and 3 are refused by their number.
        for bad in [0, 3] {
            let mut b = json.clone();
            b["format_version"] = bad.into();
            write(&b);
            let e = FleetReport::read(&p).unwrap_err();
            assert!(e.contains(&format!("not a nodecert-fleet file of version 1 to 2 (format \"nodecert-fleet\", version {bad})")), "{e}");
        }
    }

    #[test]
    fn what_the_fleet_leaves_unjudged_is_a_shortfall() {
        let short: Vec<NodeVerdict> = NodeVerdict::ALL
            .into_iter()
            .filter(|v| v.is_shortfall())
            .collect();
        assert_eq!(
            short,
            [
                NodeVerdict::NothingJudged,
                NodeVerdict::Incomplete,
                NodeVerdict::NotTested
            ]
        );
    }

    #[test]
    fn names_sort_as_people_count() {
        let mut v = vec!["n10", "n2", "n1", "gpu-a", "n02", "n", "n1x"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["gpu-a", "n", "n1", "n1x", "n2", "n02", "n10"]);
    }

    #[test]
    fn the_worst_node_sets_the_exit_code() {
        use crate::error::exit;
        assert_eq!(NodeVerdict::Flagged.exit_code(), exit::PASS);
        assert_eq!(NodeVerdict::NotTested.exit_code(), exit::INCOMPLETE);
        assert_eq!(NodeVerdict::Refused.exit_code(), exit::INVALID_INPUT);
        assert_eq!(NodeVerdict::Fail.exit_code(), exit::CHECK_FAILED);
        assert!(NodeVerdict::Refused > NodeVerdict::Fail);
        assert!(NodeVerdict::NotTested > NodeVerdict::Pass);
        assert!(NodeVerdict::Fail.drains() && !NodeVerdict::Flagged.drains());
        assert!(!NodeVerdict::NotTested.drains());
        // Partial: not a pass, not a drain; worse than flagged, better than nothing judged.
        assert_eq!(NodeVerdict::of(Verdict::Partial), NodeVerdict::Partial);
        assert_eq!(NodeVerdict::Partial.exit_code(), exit::PARTIAL);
        assert!(NodeVerdict::Partial > NodeVerdict::Flagged);
        assert!(NodeVerdict::Partial < NodeVerdict::NothingJudged);
        assert!(!NodeVerdict::Partial.drains() && !NodeVerdict::Partial.is_shortfall());
    }
}
