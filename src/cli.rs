//! The command line: what it accepts (clap) and which command runs. What each command does is
//! in [`crate::commands`].

use crate::commands::signer::{Signer, DEFAULT_SIGNER};
use crate::commands::{check, diff, inventory, keygen, list, render, run, sign, verify};
use crate::error::{exit, Error, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

pub use crate::commands::diff::diff_summary;
pub use crate::commands::list::list_text;
pub use crate::commands::{environment, exit_for};

const EXIT_CODES: &str = "\
Exit codes:
  0  every check passed (warnings and skips allowed)
  1  a check failed
  2  invalid input: suite, node description, flags, evidence or report templates
  3  the node could not be tested: no driver, no GPU, a hardware or runtime error;
     also output that could not be written (a full disk)
  4  a signature or digest did not verify
  5  incomplete run: promised checks never ran (also: sign refused it)
  6  nothing judged: every check was skipped (also: sign refused it)
  7  partial: every judgement made held, but readings a check needed were not
     available here (\"not available here: ...\"), so those were never judged
  When several hold: 3 over 1 over 5 over 6 over 7.";

const DIFF_EXIT_CODES: &str = "\
Exit codes:
  0  nothing regressed
  1  a metric regressed beyond the tolerance, a verdict got worse (the run's own: it passed
     and now does not), or GPUs or links were lost
  2  invalid input: unreadable evidence or flags";

const HEALTH_CHECK_EXIT_CODES: &str = "\
Exit codes by --mode:
  nodecert           those of `run` (0 pass, 1 fail, 3 untestable, 5 incomplete, 6 nothing judged,
                     7 partial)
  npd                0 OK, 1 a problem (a check failed or the node could not be tested), 2 unknown
                     (also partial: readings not available)
  slurm-prolog       1 when the node is bad (Slurm drains it and requeues the job), else 0
  slurm-healthcheck  1 when the node is bad, else 0; nodecert drains the node itself with
                     Reason=\"nodecert: ...\" and resumes it once it passes (only if nodecert
                     drained it)
  With --simulate and without --allow-simulated, no scheduler acts on the simulated verdict:
  npd 2 (unknown), slurm-prolog and slurm-healthcheck 0 (nothing drained).";

const FLEET_EXIT_CODES: &str = "\
Exit codes of `fleet report` and `fleet simulate` (the worst node's):
  0  every node passed (flagged nodes, slower than their siblings, allowed)
  1  a node failed a check
  2  invalid input; also a node's evidence refused (copied from another node, forged,
     unreadable, or its signature did not verify)
  3  a node could not be tested (a hardware or runtime error)
  5  a node left no evidence (NOT TESTED) or did not finish
  6  a node judged nothing
  7  a node's run was partial (readings not available there)
  When several hold: 2 over 1 over 3 over 5 over 6 over 7.
`fleet drain` exits 3 when an scontrol or kubectl call failed.";

#[derive(Parser, Debug)]
#[command(name = "nodecert", version, about = "Acceptance tests and signed certificates for multi-GPU AI servers", after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a suite and write evidence.json, report.html and report.md.
    #[command(after_help = EXIT_CODES)]
    Run {
        /// Suite file, or the name of an embedded suite. Default: the embedded suite that matches
        /// the node's GPU model and count.
        suite: Option<String>,
        #[command(flatten)]
        sim: SimArgs,
        /// Inject a fault into the simulated node: NAME[:key=value,...] (see `nodecert list`).
        #[arg(long = "inject", value_name = "FAULT", requires = "simulate")]
        inject: Vec<String>,
        /// Seed of the simulated node's noise: same seed, same numbers.
        #[arg(long, default_value_t = 1, requires = "simulate")]
        seed: u64,
        /// Name the simulated node (one of a simulated fleet): its host name, from which its
        /// GPUs' serials and UUIDs derive, so that no two nodes of the fleet share a GPU.
        #[arg(long, value_name = "NAME", requires = "simulate")]
        node_name: Option<String>,
        /// Folder for the evidence and reports.
        #[arg(long, default_value = "nodecert-report")]
        out: PathBuf,
        /// Folder with report.html.j2 and/or report.md.j2 to use instead of the embedded ones.
        #[arg(long)]
        templates: Option<PathBuf>,
        /// Print only the final verdict line.
        #[arg(long, short)]
        quiet: bool,
        /// Measure the fabric with the other nodes of this multi-node job (Slurm, a Kubernetes
        /// Indexed Job): every pair of nodes, the slow node or link found, then all at once. The
        /// suite's [checks.fabric] sets the floors.
        #[arg(long)]
        fabric: bool,
        #[command(flatten)]
        sign: SignArgs,
        #[command(flatten)]
        export: ExportArgs,
    },
    /// Generate an Ed25519 signing key: KEY (mode 0600) and KEY.pub. Only Ed25519 is generated;
    /// existing ECDSA (P-256/P-384) and RSA keys made by ssh-keygen can sign too.
    #[command(after_help = EXIT_CODES)]
    Keygen {
        /// Where to write the private key; the public key goes to KEY.pub.
        #[arg(long, value_name = "KEY")]
        out: PathBuf,
        /// Comment stored in the key, also the default signer identity.
        #[arg(long, default_value = DEFAULT_SIGNER)]
        comment: String,
    },
    /// Check a signed report folder: every signature, every file's digest.
    #[command(after_help = EXIT_CODES)]
    Verify {
        /// The report folder (holding nodecert-manifest.txt and its signatures): a node's or a
        /// fleet report's.
        dir: PathBuf,
        /// Trust the signers of this OpenSSH allowed_signers file.
        #[arg(long, value_name = "FILE", conflicts_with = "pubkey")]
        allowed_signers: Option<PathBuf>,
        /// Trust this public key.
        #[arg(long, value_name = "KEY.pub")]
        pubkey: Option<PathBuf>,
        /// Exit 0 only if the signatures verify and what they seal is a pass of real hardware:
        /// otherwise the exit code of the verdict they seal (1 fail, 3 untestable, 5 incomplete,
        /// 6 nothing judged, 7 partial), or 2 for simulated results. For a gate before a node
        /// is taken into service.
        #[arg(long)]
        require_pass: bool,
        /// With --require-pass, let a pass of a simulated node through (a rehearsal of the gate).
        #[arg(long, requires = "require_pass")]
        allow_simulated: bool,
        /// With --require-pass, the certificate must be this host's (its evidence's host name):
        /// a certificate copied from another node verifies as well (exit 2 otherwise).
        #[arg(long, value_name = "NAME", requires = "require_pass")]
        host: Option<String>,
        /// With --require-pass, the certificate must be of this suite, by name; an embedded
        /// suite's name must be that embedded suite, not a file of the same name (exit 2
        /// otherwise).
        #[arg(long, value_name = "NAME", requires = "require_pass")]
        suite: Option<String>,
        /// With --require-pass, the certificate's suite file must have this SHA-256 (as
        /// `sha256sum` prints it; exit 2 otherwise).
        #[arg(long, value_name = "HEX", requires = "require_pass")]
        suite_sha256: Option<String>,
        /// Print one JSON document (format "nodecert-verify") instead of the text: the
        /// signatures and digests, what they seal (verdict, host, GPU serials, suite), what
        /// --require-pass concluded, and the exit code. Errors still go to stderr.
        #[arg(long)]
        json: bool,
    },
    /// Sign a report folder, or countersign one that is already signed.
    #[command(after_help = EXIT_CODES)]
    Sign {
        /// The report folder: a node's (evidence.json) or a fleet report's (fleet.json).
        dir: PathBuf,
        /// Unencrypted OpenSSH private key: Ed25519, ECDSA P-256/P-384 or RSA. Security keys
        /// (sk-*) sign only with `ssh-keygen -Y sign`; `verify` checks their signatures.
        #[arg(long, value_name = "KEY")]
        key: PathBuf,
        /// Identity for the allowed_signers line printed (default: the key's comment).
        #[arg(long, value_name = "ID")]
        signer_id: Option<String>,
        /// Sign a run that did not finish or judged nothing (refused otherwise, exit 5 or 6); the
        /// reports are rendered again so that their title says "signed as incomplete".
        #[arg(long)]
        allow_incomplete: bool,
        /// The first signature renders a node's reports again from its evidence, to name the
        /// signer: with these templates (default: the embedded ones).
        #[arg(long, value_name = "DIR")]
        templates: Option<PathBuf>,
    },
    /// Compare two runs: hardware changes, metrics that regressed, verdicts that changed.
    #[command(after_help = DIFF_EXIT_CODES)]
    Diff {
        /// The earlier run: evidence.json or a report folder holding one.
        old: PathBuf,
        /// The later run.
        new: PathBuf,
        /// Folder for diff.md and diff.html.
        #[arg(long, default_value = "nodecert-diff")]
        out: PathBuf,
        /// How much worse a metric may get before it counts as a regression, percent.
        #[arg(long, value_name = "P", default_value_t = crate::diff::DEFAULT_TOLERANCE_PCT)]
        tolerance_pct: f64,
    },
    /// Validate a suite and print the plan it expands to, without running anything.
    #[command(after_help = EXIT_CODES)]
    Check {
        /// Suite file, or the name of an embedded suite.
        suite: String,
        #[command(flatten)]
        sim: SimArgs,
        /// Print only the lines a fleet job's node list records of its suite (`# suite: NAME`
        /// and `# suite-sha256: HEX`, the digest of the suite as every node will run it), as the
        /// Slurm script does when the job starts.
        #[arg(long, conflicts_with = "simulate")]
        job_lines: bool,
        /// With --job-lines: the suite as `run --fabric` runs it (its fabric check enabled).
        #[arg(long, requires = "job_lines")]
        fabric: bool,
    },
    /// Print what the node is.
    #[command(after_help = EXIT_CODES)]
    Inventory {
        #[command(flatten)]
        sim: SimArgs,
        /// The full structure as JSON.
        #[arg(long, conflicts_with = "as_suite")]
        json: bool,
        /// Write a suite that expects exactly this node (to FILE, or stdout without one): the
        /// way to freeze a node at handover.
        #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
        as_suite: Option<PathBuf>,
        /// Let --as-suite FILE replace an existing file (a frozen suite is never replaced
        /// silently).
        #[arg(long, requires = "as_suite")]
        force: bool,
    },
    /// Render the reports again from an evidence file.
    #[command(after_help = EXIT_CODES)]
    Render {
        /// evidence.json (or a report folder that holds one).
        evidence: PathBuf,
        /// Folder for report.html and report.md (default: beside the evidence).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Folder with report.html.j2 and/or report.md.j2 to use instead of the embedded ones.
        #[arg(long)]
        templates: Option<PathBuf>,
        #[command(flatten)]
        export: ExportArgs,
    },
    /// List the embedded suites, simulated nodes and faults.
    List,
    /// The suite's quick profile (topology, virtualization, health: seconds, no bandwidth), with
    /// the exit codes of Slurm's HealthCheckProgram or Prolog, or of a node-problem-detector
    /// plugin. Writes no files.
    #[command(after_help = HEALTH_CHECK_EXIT_CODES)]
    HealthCheck {
        /// Suite file, or the name of an embedded suite (default: the one matching the node).
        suite: Option<String>,
        #[command(flatten)]
        sim: SimArgs,
        /// Inject a fault into the simulated node (see `nodecert list`).
        #[arg(long = "inject", value_name = "FAULT", requires = "simulate")]
        inject: Vec<String>,
        /// Name the simulated node (see `run --node-name`).
        #[arg(long, value_name = "NAME", requires = "simulate")]
        node_name: Option<String>,
        /// Whose conventions the exit code follows.
        #[arg(long, value_enum, default_value = "nodecert")]
        mode: crate::commands::health_check::Mode,
        /// Answer a scheduler (--mode npd, slurm-prolog, slurm-healthcheck) with a simulated
        /// verdict as with a measured one, and drain or resume in slurm-healthcheck mode: for a
        /// test cluster whose nodes are simulated. Without it a simulated check leaves the
        /// node alone (npd: 2, unknown; Slurm: 0), since its verdict certifies no hardware.
        #[arg(long, requires = "simulate")]
        allow_simulated: bool,
    },
    /// Certify many nodes: dispatch through Slurm or Kubernetes, gather every node's evidence
    /// into one report, drain the bad nodes.
    #[command(subcommand, after_help = FLEET_EXIT_CODES)]
    Fleet(FleetCommand),
    /// Internal: measure a collective with NVLS forced off and answer in JSON on stdout (run by
    /// nodecert itself in a child process; see `backend::no_nvls`).
    #[command(name = "__collective-no-nvls", hide = true)]
    CollectiveNoNvls {
        /// The request, JSON.
        request: String,
    },
    /// Internal: write FILE for a fleet job's script as nodecert writes every file (a regular
    /// file replaced whole, never through a link nor into a FIFO planted in its place): what
    /// stdin gives (at most 1 MiB), or with --new-key a new job key readable by its owner alone.
    #[command(name = "__job-file", hide = true)]
    JobFile {
        file: PathBuf,
        #[arg(long)]
        new_key: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Read every node's report folder and write the fleet's report: fleet.json, fleet.html,
    /// fleet.md, fleet-junit.xml and fleet.prom. Exit code: that of the worst node.
    Report {
        /// Node report folders, or shared folders holding one folder per node (as the fleet
        /// jobs write them, with the job's node list in expected-nodes.txt).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Folder for the fleet's report.
        #[arg(long, default_value = "nodecert-fleet")]
        out: PathBuf,
        /// The nodes that must have reported, as a Slurm host list (n[1-16],gpu-a); default:
        /// expected-nodes.txt of the shared folders. A node without evidence is NOT TESTED.
        #[arg(long, value_name = "HOSTLIST")]
        expect: Option<String>,
        /// The suite every node must have run, by its name, where the shared folders' node list
        /// names none (the Slurm job's expected-nodes.txt names its suite, with its digest; a
        /// --suite that differs from it is an error). A node that ran another is REFUSED.
        #[arg(long, value_name = "NAME")]
        suite: Option<String>,
        /// Flag a node whose figure its suite passed but is more than P% worse than the median
        /// of at least 5 like nodes (same suite, same GPU model).
        #[arg(long, value_name = "P", default_value_t = crate::fleet::DEFAULT_OUTLIER_PCT)]
        outlier_pct: f64,
        #[command(flatten)]
        trust: TrustArgs,
        #[command(flatten)]
        sign: SignArgs,
    },
    /// Run a simulated fleet (each node its own seed and GPUs) and write its report, to see the
    /// whole flow without a cluster. Everything it writes says SIMULATED.
    Simulate {
        /// How many nodes.
        #[arg(long, default_value_t = 8)]
        nodes: u32,
        /// The simulated node description every node uses.
        #[arg(long, default_value = "h100-sxm-8")]
        node: String,
        /// Suite (default: the node description's own).
        #[arg(long)]
        suite: Option<String>,
        /// A fault on one node: NODE:FAULT (n03:nvlink-down:gpu=2; see `nodecert list`).
        #[arg(long = "inject", value_name = "NODE:FAULT")]
        inject: Vec<String>,
        /// Folder for the nodes' folders and, in fleet/, the fleet's report.
        #[arg(long, default_value = "nodecert-fleet-sim")]
        out: PathBuf,
        #[arg(long, value_name = "P", default_value_t = crate::fleet::DEFAULT_OUTLIER_PCT)]
        outlier_pct: f64,
        /// Run the nodes at once, one process each, and measure the fabric across them over
        /// loopback (`run --fabric`): 2 to 64 nodes.
        #[arg(long)]
        fabric: bool,
    },
    /// Write the Slurm batch script that certifies a fleet (one exclusive task per node, each
    /// `nodecert run` into DIR/NODE, then `fleet report` into DIR/fleet), and submit it.
    Slurm {
        /// Suite (a path every node can read, or an embedded name); default: each node's own.
        suite: Option<String>,
        /// The shared folder every node can write.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// How many nodes.
        #[arg(long)]
        nodes: Option<u32>,
        /// Which nodes (a Slurm host list).
        #[arg(long, value_name = "HOSTLIST")]
        nodelist: Option<String>,
        #[arg(long)]
        partition: Option<String>,
        /// Slurm time limit (--time), e.g. 30:00.
        #[arg(long)]
        time: Option<String>,
        /// Another #SBATCH option, as --option=value (repeat for more).
        #[arg(long = "sbatch-arg", value_name = "OPTION")]
        sbatch_args: Vec<String>,
        /// The nodecert binary every node runs (default: this one's path).
        #[arg(long, value_name = "PATH")]
        nodecert: Option<String>,
        /// Rehearse on simulated nodes of this description.
        #[arg(long, value_name = "NODE")]
        simulate: Option<String>,
        /// With --simulate: a fault on one node, NODE:FAULT.
        #[arg(long = "inject", value_name = "NODE:FAULT", requires = "simulate")]
        inject: Vec<String>,
        /// Submit it with sbatch.
        #[arg(long)]
        submit: bool,
        /// Measure the fabric across the job's nodes too (`run --fabric`: every pair of nodes,
        /// the slow node or link found).
        #[arg(long)]
        fabric: bool,
        /// With --submit: wait for the job to end and print the fleet's verdict (its exit code).
        #[arg(long, requires = "submit")]
        wait: bool,
    },
    /// Write the Kubernetes manifests that certify a fleet: an Indexed Job (one pod per node,
    /// anti-affinity, nvidia.com/gpu requested) and its headless Service, as JSON for kubectl.
    K8s {
        /// Suite (a path in the image, or an embedded name); default: each node's own.
        suite: Option<String>,
        /// How many nodes (the Job's completions).
        #[arg(long)]
        nodes: u32,
        /// GPUs per node.
        #[arg(long, default_value_t = 8)]
        gpus: u32,
        /// The container image with nodecert in it.
        #[arg(long)]
        image: String,
        /// The ReadWriteMany PersistentVolumeClaim the nodes write their folders to.
        #[arg(long)]
        claim: String,
        #[arg(long, default_value = "nodecert")]
        name: String,
        #[arg(long)]
        namespace: Option<String>,
        /// Rehearse on simulated nodes of this description (no GPUs requested).
        #[arg(long, value_name = "NODE")]
        simulate: Option<String>,
        /// Measure the fabric across the pods too (`run --fabric`).
        #[arg(long)]
        fabric: bool,
        /// Write the manifests to FILE (default: stdout).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Write a suite that extends the fleet's SKU suite with what its passing nodes measure:
    /// each figure's median as its typical value, its floor a margin below (never below the
    /// SKU suite's own).
    Baseline {
        /// fleet.json, or the folder holding it.
        fleet: PathBuf,
        /// The suite to extend (an embedded name or a path); default: the suite the nodes ran.
        #[arg(long)]
        extends: Option<String>,
        /// The new suite's name (default: the extended suite's name with "-fleet").
        #[arg(long)]
        name: Option<String>,
        /// How far below the fleet's median each floor goes, percent.
        #[arg(long, value_name = "P", default_value_t = 10.0)]
        margin_pct: f64,
        /// The suite file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Take the fleet's failed, erroring and refused nodes out of service: Slurm drain with
    /// Reason="nodecert: ..." (and resume the nodes nodecert drained that now pass), or a
    /// Kubernetes NoSchedule taint and a verdict label.
    Drain {
        /// fleet.json, or the folder holding it.
        fleet: PathBuf,
        #[arg(long, conflicts_with = "k8s", required_unless_present = "k8s")]
        slurm: bool,
        #[arg(long)]
        k8s: bool,
        /// Print the commands without running them.
        #[arg(long)]
        dry_run: bool,
        /// Run the commands although the fleet's results are simulated: for a test cluster
        /// whose nodes are simulated. Without it a simulated fleet's drain is refused (its
        /// verdicts certify no hardware); --dry-run still shows it.
        #[arg(long)]
        allow_simulated: bool,
        /// Act only on a fleet report signed by a signer of this OpenSSH allowed_signers file,
        /// verified first (exit 4 otherwise): whoever can write an unsigned fleet.json chooses
        /// which nodes are drained.
        #[arg(long, value_name = "FILE", conflicts_with = "pubkey")]
        allowed_signers: Option<PathBuf>,
        /// Act only on a fleet report signed with this public key, verified first (exit 4
        /// otherwise).
        #[arg(long, value_name = "KEY.pub")]
        pubkey: Option<PathBuf>,
        /// Act only on the report of this scheduler job (fleet.json's `job`): an older report,
        /// signed as well, copied into the folder is refused (exit 2).
        #[arg(long, value_name = "ID")]
        job: Option<String>,
    },
}

/// Signing the folder a command writes (`run`, `fleet report`).
#[derive(clap::Args, Debug, Default)]
pub struct SignArgs {
    /// Sign the folder with this OpenSSH private key: Ed25519 (see `nodecert keygen`), ECDSA
    /// P-256/P-384 or RSA, unencrypted. Check it later with `nodecert verify`.
    #[arg(long, value_name = "KEY")]
    pub sign_key: Option<PathBuf>,
    /// Identity of the signer in the verify command and allowed_signers line (default: the
    /// key's comment, else "nodecert-signer").
    #[arg(long, value_name = "ID", requires = "sign_key")]
    pub signer_id: Option<String>,
    /// Sign even what was never wholly judged (a run that judged nothing or did not finish, a
    /// fleet with a node not tested); the title then says "signed as ...".
    #[arg(long, requires = "sign_key")]
    pub allow_incomplete: bool,
}

impl SignArgs {
    /// The signing key, checked before any work is done (None: no signing asked).
    pub fn signer(&self) -> Result<Option<Signer>> {
        match &self.sign_key {
            Some(k) => Ok(Some(Signer::open(k, self.signer_id.clone())?)),
            None => Ok(None),
        }
    }
}

/// Whom a signature must be by.
#[derive(clap::Args, Debug, Default)]
pub struct TrustArgs {
    /// Verify signed node folders against this OpenSSH allowed_signers file.
    #[arg(long, value_name = "FILE", conflicts_with = "pubkey")]
    pub allowed_signers: Option<PathBuf>,
    /// Verify signed node folders against this public key.
    #[arg(long, value_name = "KEY.pub")]
    pub pubkey: Option<PathBuf>,
}

impl TrustArgs {
    pub fn trust(&self) -> crate::sign::Trust {
        match (&self.allowed_signers, &self.pubkey) {
            (Some(p), _) => crate::sign::Trust::AllowedSigners(p.clone()),
            (None, Some(k)) => crate::sign::Trust::PublicKey(k.clone()),
            (None, None) => crate::sign::Trust::Untrusted,
        }
    }
}

/// Machine outputs, beside the reports.
#[derive(clap::Args, Debug, Default)]
pub struct ExportArgs {
    /// Also write the checks as a JUnit XML test report to FILE (for CI test dashboards).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write the results as Prometheus metrics to FILE, in the text format that
    /// node_exporter's textfile collector reads (name it *.prom). Written atomically.
    #[arg(long, value_name = "FILE")]
    pub prometheus: Option<PathBuf>,
    /// Let --junit and --prometheus replace a file in a signed report folder, or a file that is
    /// not an earlier output of the same kind (a suite, someone's notes); let `render` write its
    /// pages into a folder that holds another run's evidence; and let `run` and `render` replace
    /// an evidence.json or a page there that nodecert did not write.
    #[arg(long)]
    pub force: bool,
}

impl Command {
    /// Whether the command runs on a simulated node (--simulate).
    fn simulates(&self) -> bool {
        match self {
            Command::Run { sim, .. }
            | Command::Check { sim, .. }
            | Command::Inventory { sim, .. }
            | Command::HealthCheck { sim, .. } => sim.simulate.is_some(),
            _ => false,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Use a simulated node (embedded name or a node file) instead of the real hardware.
    #[arg(long, value_name = "NODE")]
    pub simulate: Option<String>,
}

/// Parse, run, and return the exit code. Errors are printed here; a result that could not be
/// printed (a full disk) turns a 0 into 3 (see [`crate::stdio`]).
///
/// Arguments are taken as the system gives them: a path that is not UTF-8 (a folder another
/// tool named) is a path clap reads, or a value it refuses in words (exit 2), never a panic.
/// The command line the evidence records shows such bytes as U+FFFD.
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> u8 {
    crate::stdio::finish(run(args))
}

/// A command-line error as lines to print: clap's text without its styles, each line shown as
/// it may reach a terminal.
fn error_lines(e: &clap::Error) -> Vec<String> {
    let text = e.render().to_string();
    text.trim_end_matches('\n')
        .split('\n')
        .map(crate::console::visible)
        .collect()
}

fn run(args: Vec<std::ffi::OsString>) -> u8 {
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            if e.use_stderr() {
                // An error quotes what was given (a value from a job script's environment, say):
                // plain text, each line shown as it may reach a terminal, never clap's colours
                // around a value that carries escapes of its own.
                for line in error_lines(&e) {
                    crate::errln!("{line}");
                }
            } else if e.print().is_err() {
                crate::stdio::failed(false);
            }
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    exit::PASS
                }
                _ => exit::INVALID_INPUT,
            };
        }
    };
    let simulating = cli.command.simulates();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match dispatch(cli, &args) {
        Ok(code) => code,
        Err(e) => {
            crate::errln!("error: {}", e.console_text());
            if matches!(e, Error::Hardware(_)) && !simulating {
                crate::errln!("hint: to rehearse a suite without GPUs, add --simulate NODE (see `nodecert list`)");
            }
            e.exit_code()
        }
    }
}

fn dispatch(cli: Cli, args: &[String]) -> Result<u8> {
    match cli.command {
        Command::Run {
            suite,
            sim,
            inject,
            seed,
            node_name,
            fabric,
            out,
            templates,
            quiet,
            sign,
            export,
        } => {
            let signer = sign.signer()?;
            let allow_incomplete = sign.allow_incomplete;
            run::cmd_run(
                suite,
                sim.simulate,
                inject,
                seed,
                node_name,
                fabric,
                &out,
                templates.as_deref(),
                quiet,
                signer.as_ref().map(|s| (s, allow_incomplete)),
                &export,
                args,
            )
        }
        Command::Keygen { out, comment } => keygen::cmd_keygen(&out, &comment),
        Command::Verify {
            dir,
            allowed_signers,
            pubkey,
            require_pass,
            allow_simulated,
            host,
            suite,
            suite_sha256,
            json,
        } => verify::cmd_verify(
            &dir,
            &TrustArgs {
                allowed_signers,
                pubkey,
            }
            .trust(),
            &verify::Require {
                pass: require_pass,
                allow_simulated,
                host,
                suite,
                suite_sha256,
            },
            json,
        ),
        Command::Sign {
            dir,
            key,
            signer_id,
            allow_incomplete,
            templates,
        } => sign::cmd_sign(
            &dir,
            &Signer::open(&key, signer_id)?,
            allow_incomplete,
            templates.as_deref(),
        ),
        Command::Diff {
            old,
            new,
            out,
            tolerance_pct,
        } => diff::cmd_diff(&old, &new, &out, tolerance_pct),
        Command::Check {
            suite,
            job_lines: true,
            fabric,
            ..
        } => check::cmd_job_lines(&suite, fabric),
        Command::Check { suite, sim, .. } => check::cmd_check(&suite, sim.simulate),
        Command::Inventory {
            sim,
            json,
            as_suite,
            force,
        } => inventory::cmd_inventory(sim.simulate, json, as_suite.as_deref(), force),
        Command::Render {
            evidence,
            out,
            templates,
            export,
        } => render::cmd_render(&evidence, out, templates.as_deref(), &export),
        Command::CollectiveNoNvls { request } => Ok(crate::backend::no_nvls::serve(&request)),
        Command::JobFile { file, new_key } => crate::commands::fleet::cmd_job_file(&file, new_key),
        Command::Fleet(f) => fleet_dispatch(f, args),
        Command::HealthCheck {
            suite,
            sim,
            inject,
            node_name,
            mode,
            allow_simulated,
        } => crate::commands::health_check::cmd_health_check(
            suite,
            sim.simulate,
            inject,
            node_name,
            mode,
            allow_simulated,
        ),
        Command::List => {
            crate::out!("{}", list::list_text());
            Ok(exit::PASS)
        }
    }
}

fn fleet_dispatch(f: FleetCommand, args: &[String]) -> Result<u8> {
    use crate::commands::fleet;
    match f {
        FleetCommand::Report {
            dirs,
            out,
            expect,
            suite,
            outlier_pct,
            trust,
            sign,
        } => {
            let signer = sign.signer()?;
            let allow_incomplete = sign.allow_incomplete;
            fleet::cmd_report(
                &dirs,
                &out,
                fleet::Expected {
                    nodes: expect.as_deref(),
                    suite: suite.as_deref(),
                },
                outlier_pct,
                &trust.trust(),
                signer.as_ref().map(|s| (s, allow_incomplete)),
            )
        }
        FleetCommand::Simulate {
            nodes,
            node,
            suite,
            inject,
            out,
            outlier_pct,
            fabric,
        } => fleet::cmd_simulate(
            nodes,
            &node,
            suite,
            &inject,
            &out,
            outlier_pct,
            fabric,
            args,
        ),
        FleetCommand::Slurm {
            suite,
            out,
            nodes,
            nodelist,
            partition,
            time,
            sbatch_args,
            nodecert,
            simulate,
            inject,
            submit,
            wait,
            fabric,
        } => {
            let inject = inject
                .iter()
                .map(|s| crate::fleet::simulate::parse_inject(s))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| crate::error::Error::Input(crate::error::InputError::Other(e)))?;
            let job = crate::fleet::slurm::Job {
                suite,
                out: out.display().to_string(),
                nodecert: nodecert.unwrap_or_default(),
                nodes,
                nodelist,
                partition,
                time,
                simulate,
                inject,
                sbatch_args,
                fabric,
            };
            fleet::cmd_slurm(job, submit, wait)
        }
        FleetCommand::K8s {
            suite,
            nodes,
            gpus,
            image,
            claim,
            name,
            namespace,
            simulate,
            fabric,
            out,
        } => fleet::cmd_k8s(
            crate::fleet::k8s::Job {
                name,
                namespace,
                nodes,
                gpus,
                image,
                suite,
                claim,
                simulate,
                fabric,
            },
            out.as_deref(),
        ),
        FleetCommand::Baseline {
            fleet: path,
            extends,
            name,
            margin_pct,
            out,
            force,
        } => fleet::cmd_baseline(&path, extends, name, margin_pct, &out, force),
        FleetCommand::Drain {
            fleet: path,
            slurm: _,
            k8s,
            dry_run,
            allow_simulated,
            allowed_signers,
            pubkey,
            job,
        } => fleet::cmd_drain(
            &path,
            if k8s {
                fleet::Scheduler::Kubernetes
            } else {
                fleet::Scheduler::Slurm
            },
            dry_run,
            allow_simulated,
            &TrustArgs {
                allowed_signers,
                pubkey,
            }
            .trust(),
            job.as_deref(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// A value given on the command line that carries terminal escapes (a job script passing
    /// what its environment held) reaches the error printed as plain text: no ESC, no colour
    /// around it, even where clap would colour its message for a terminal.
    #[test]
    fn a_command_line_error_prints_no_escape_of_its_own_or_of_the_value() {
        let e = Cli::command()
            .color(clap::ColorChoice::Always)
            .try_get_matches_from(["nodecert", "run", "--seed", "x\u{1b}[31mRED\u{202e}"])
            .unwrap_err();
        assert!(e.render().ansi().to_string().contains('\u{1b}'));
        let lines = error_lines(&e);
        assert!(lines[0].starts_with("error: invalid value"), "{lines:?}");
        for l in &lines {
            assert!(!l.contains(['\u{1b}', '\u{202e}', '\n']), "{l:?}");
        }
    }
}
