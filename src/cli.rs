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
  When several hold: 3 over 1 over 5 over 6.";

const DIFF_EXIT_CODES: &str = "\
Exit codes:
  0  nothing regressed
  1  a metric regressed beyond the tolerance, a verdict got worse, or GPUs or links were lost
  2  invalid input: unreadable evidence or flags";

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
        /// Folder for the evidence and reports.
        #[arg(long, default_value = "nodecert-report")]
        out: PathBuf,
        /// Folder with report.html.j2 and/or report.md.j2 to use instead of the embedded ones.
        #[arg(long)]
        templates: Option<PathBuf>,
        /// Print only the final verdict line.
        #[arg(long, short)]
        quiet: bool,
        /// Sign the report folder with this OpenSSH private key: Ed25519 (see `nodecert keygen`),
        /// ECDSA P-256/P-384 or RSA, unencrypted.
        #[arg(long, value_name = "KEY")]
        sign_key: Option<PathBuf>,
        /// Identity of the signer in the verify command and allowed_signers line (default: the
        /// key's comment, else "nodecert-signer").
        #[arg(long, value_name = "ID", requires = "sign_key")]
        signer_id: Option<String>,
        /// Sign even a run that judged nothing; the title then says "signed as nothing judged".
        #[arg(long, requires = "sign_key")]
        allow_incomplete: bool,
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
        /// The report folder (holding nodecert-manifest.txt and its signatures).
        dir: PathBuf,
        /// Trust the signers of this OpenSSH allowed_signers file.
        #[arg(long, value_name = "FILE", conflicts_with = "pubkey")]
        allowed_signers: Option<PathBuf>,
        /// Trust this public key.
        #[arg(long, value_name = "KEY.pub")]
        pubkey: Option<PathBuf>,
    },
    /// Sign a report folder, or countersign one that is already signed.
    #[command(after_help = EXIT_CODES)]
    Sign {
        /// The report folder.
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
    /// Internal: measure a collective with NVLS forced off and answer in JSON on stdout (run by
    /// nodecert itself in a child process; see `backend::no_nvls`).
    #[command(name = "__collective-no-nvls", hide = true)]
    CollectiveNoNvls {
        /// The request, JSON.
        request: String,
    },
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
    /// not an earlier output of the same kind (a suite, someone's notes).
    #[arg(long)]
    pub force: bool,
}

impl Command {
    /// Whether the command runs on a simulated node (--simulate).
    fn simulates(&self) -> bool {
        match self {
            Command::Run { sim, .. }
            | Command::Check { sim, .. }
            | Command::Inventory { sim, .. } => sim.simulate.is_some(),
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
pub fn main_with_args(args: Vec<String>) -> u8 {
    crate::stdio::finish(run(args))
}

fn run(args: Vec<String>) -> u8 {
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            if e.print().is_err() {
                crate::stdio::failed(e.use_stderr());
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
            out,
            templates,
            quiet,
            sign_key,
            signer_id,
            allow_incomplete,
            export,
        } => {
            let signer = match &sign_key {
                Some(k) => Some(Signer::open(k, signer_id)?),
                None => None,
            };
            run::cmd_run(
                suite,
                sim.simulate,
                inject,
                seed,
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
        } => verify::cmd_verify(&dir, allowed_signers, pubkey),
        Command::Sign {
            dir,
            key,
            signer_id,
            allow_incomplete,
        } => sign::cmd_sign(&dir, &Signer::open(&key, signer_id)?, allow_incomplete),
        Command::Diff {
            old,
            new,
            out,
            tolerance_pct,
        } => diff::cmd_diff(&old, &new, &out, tolerance_pct),
        Command::Check { suite, sim } => check::cmd_check(&suite, sim.simulate),
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
        Command::List => {
            crate::out!("{}", list::list_text());
            Ok(exit::PASS)
        }
    }
}
