//! The command line.

use crate::backend::sim::{self, Fault, SimBackend};
use crate::backend::Backend;
use crate::error::{exit, Error, InputError, Result};
use crate::evidence::{Environment, Evidence, SimulationRecord};
use crate::fsio::write::{Dir, LockedDir};
use crate::sign;
use crate::suite::load::{self, LoadedSuite};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

const EXIT_CODES: &str = "\
Exit codes:
  0  every check passed (warnings and skips allowed)
  1  a check failed
  2  invalid input: suite, node description, flags or evidence
  3  the node could not be tested: no driver, no GPU, a hardware or runtime error
  4  a signature or digest did not verify
  5  incomplete run: promised checks never ran (also: sign refused it)
  6  nothing judged: every check was skipped (also: sign refused it)
  When several hold: 3 over 1 over 5 over 6.";

const DIFF_EXIT_CODES: &str = "\
Exit codes:
  0  nothing regressed
  1  a metric regressed beyond the tolerance, a verdict got worse, or GPUs or links were lost
  2  invalid input: unreadable evidence or flags";

/// Signer identity when neither --signer-id nor a usable key comment gives one.
const DEFAULT_SIGNER: &str = "nodecert-signer";

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

impl ExportArgs {
    fn outputs(&self) -> Vec<(&Path, Box<dyn crate::export::Exporter>)> {
        let mut v: Vec<(&Path, Box<dyn crate::export::Exporter>)> = Vec::new();
        if let Some(p) = &self.junit {
            v.push((p, Box::new(crate::export::junit::Junit)));
        }
        if let Some(p) = &self.prometheus {
            v.push((p, Box::new(crate::export::prometheus::Prometheus)));
        }
        v
    }

    /// Fail before a long run when an output could not or must not be written: its folder must
    /// exist and the target be absent or a regular file; it must not be one of the files of the
    /// report folder `out` or the evidence read (`reading`); without --force, it must not be in a
    /// signed folder nor replace a file that is not an earlier output of its kind.
    fn check(&self, out: &Path, reading: Option<&Path>) -> Result<()> {
        let refuse = |flag: &str, path: &Path, why: String| -> Result<()> {
            Err(Error::Input(InputError::Other(format!(
                "{flag} {}: {why}",
                path.display()
            ))))
        };
        for (path, e) in self.outputs() {
            let flag = e.flag();
            if let Err(why) = crate::fsio::write::check_target(path) {
                return refuse(flag, path, why.to_string());
            }
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let own = sign::DEFAULT_FILES.contains(&name) || name.starts_with(sign::MANIFEST_FILE);
            if own && crate::fsio::write::same_dir(dir, out) {
                return refuse(
                    flag,
                    path,
                    format!(
                        "is one of the report's own files in {}: choose another file",
                        out.display()
                    ),
                );
            }
            if reading.is_some_and(|r| crate::fsio::write::same_file(r, path)) {
                return refuse(
                    flag,
                    path,
                    "is the evidence being read: choose another file".into(),
                );
            }
            if self.force {
                continue;
            }
            if dir.join(sign::MANIFEST_FILE).exists() {
                return refuse(
                    flag,
                    path,
                    format!(
                        "{} holds a signed report; add --force to write there anyway",
                        dir.display()
                    ),
                );
            }
            if let Ok(f) = crate::fsio::read::open(path, false) {
                let head = crate::fsio::read::read_limited(
                    std::io::Read::take(f, 4096),
                    4096,
                    "the start of a file",
                )
                .unwrap_or_default();
                let head = String::from_utf8_lossy(&head);
                if !head.is_empty() && !crate::export::is_previous_output(e.as_ref(), &head) {
                    return refuse(
                        flag,
                        path,
                        format!(
                            "exists and is not an earlier {flag} output; add --force to replace it"
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// Write every output asked for; returns the paths written.
    fn write(&self, ev: &Evidence) -> Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        for (path, e) in self.outputs() {
            crate::export::write(e.as_ref(), ev, path).map_err(|source| Error::Write {
                path: path.to_path_buf(),
                source,
            })?;
            written.push(path.to_path_buf());
        }
        Ok(written)
    }
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

/// Parse, run, and return the exit code. Errors are printed here.
pub fn main_with_args(args: Vec<String>) -> u8 {
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
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
            eprintln!("error: {}", crate::console::visible_lines(&e.to_string()));
            if matches!(e, Error::Hardware(_)) && !simulating {
                eprintln!("hint: to rehearse a suite without GPUs, add --simulate NODE (see `nodecert list`)");
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
            cmd_run(
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
        Command::Keygen { out, comment } => cmd_keygen(&out, &comment),
        Command::Verify {
            dir,
            allowed_signers,
            pubkey,
        } => cmd_verify(&dir, allowed_signers, pubkey),
        Command::Sign {
            dir,
            key,
            signer_id,
            allow_incomplete,
        } => cmd_sign(&dir, &Signer::open(&key, signer_id)?, allow_incomplete),
        Command::Diff {
            old,
            new,
            out,
            tolerance_pct,
        } => cmd_diff(&old, &new, &out, tolerance_pct),
        Command::Check { suite, sim } => cmd_check(&suite, sim.simulate),
        Command::Inventory {
            sim,
            json,
            as_suite,
            force,
        } => cmd_inventory(sim.simulate, json, as_suite.as_deref(), force),
        Command::Render {
            evidence,
            out,
            templates,
            export,
        } => cmd_render(&evidence, out, templates.as_deref(), &export),
        Command::List => {
            print!("{}", list_text());
            Ok(exit::PASS)
        }
    }
}

/// The backend: simulated when asked, else the real node.
fn backend(
    simulate: Option<&str>,
    inject: &[String],
    seed: u64,
) -> Result<(Box<dyn Backend>, Option<SimulationRecord>)> {
    match simulate {
        Some(spec) => {
            let node = sim::load_node(spec)?;
            let faults: Vec<Fault> = inject
                .iter()
                .map(|s| {
                    Fault::parse(s)
                        .map_err(|e| Error::Input(InputError::Other(format!("--inject {e}"))))
                })
                .collect::<Result<_>>()?;
            let b = SimBackend::new(node, faults, seed)?;
            let rec = SimulationRecord {
                node: b.node().name.clone(),
                seed,
                faults: b.faults().iter().map(Fault::label).collect(),
            };
            Ok((Box::new(b), Some(rec)))
        }
        None => {
            // cudarc loads libraries by names that pip wheels and runtime packages may lack:
            // re-execute once with links to the versioned files found (see backend::cuda::libs).
            crate::backend::cuda::libs::reexec_if_needed();
            Ok((crate::backend::real::open()?, None))
        }
    }
}

fn pick_suite(suite: Option<String>, inv: &crate::inventory::Inventory) -> Result<LoadedSuite> {
    match suite {
        Some(s) => Ok(load::load(&s)?),
        None => {
            let name = inv.gpus.first().map(|g| g.name.clone()).unwrap_or_default();
            let virt = !matches!(
                inv.virtualization.mode,
                crate::inventory::VirtMode::BareMetal
            );
            let pick = load::matching_embedded(&name, inv.gpus.len(), virt).ok_or_else(|| {
                InputError::Other(format!(
                    "no embedded suite matches this node ({}); name a suite file or one of: {}",
                    inv.summary(),
                    load::EMBEDDED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            Ok(load::load(pick)?)
        }
    }
}

pub fn environment(args: &[String]) -> Environment {
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
        t.lines().find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
    });
    Environment {
        os,
        kernel,
        cpu_model,
        command_line: args.to_vec(),
    }
}

#[allow(clippy::too_many_arguments)]
fn cmd_run(
    suite: Option<String>,
    simulate: Option<String>,
    inject: Vec<String>,
    seed: u64,
    out: &Path,
    templates: Option<&Path>,
    quiet: bool,
    signer: Option<(&Signer, bool)>,
    export: &ExportArgs,
    args: &[String],
) -> Result<u8> {
    // Validate what the user gave before touching hardware.
    if out.join(sign::MANIFEST_FILE).exists() {
        return Err(InputError::Other(format!(
            "{} holds a signed report ({}); refusing to overwrite it: choose another --out",
            out.display(),
            sign::MANIFEST_FILE
        ))
        .into());
    }
    let pre_loaded = match &suite {
        Some(s) => Some(load::load(s)?),
        None => None,
    };
    export.check(out, None)?;
    if let Some(t) = templates {
        // Fail early on broken templates rather than after a long run.
        crate::report::render(
            &sample_evidence_for_templates(),
            Some(t),
            &Default::default(),
        )
        .map_err(Error::Render)?;
    }
    let (mut b, simrec) = backend(simulate.as_deref(), &inject, seed)?;
    let inv = b.inventory()?;
    let loaded = match (pre_loaded, &simrec) {
        (Some(l), _) => l,
        // A simulated node is a shipped SKU: its suite is the one of the same name, whatever
        // faults do to the GPU count.
        (None, Some(rec)) if load::embedded(&rec.node).is_some() => load::load(&rec.node)?,
        (None, _) => pick_suite(None, &inv)?,
    };
    crate::checks::check_evidence_size(&loaded, inv.gpus.len())?;
    // Held until the run ends: no other nodecert writes here meanwhile.
    let dir = open_report_dir(out)?;
    let evidence_path = out.join(crate::evidence::EVIDENCE_FILE);
    let mut console = crate::console::Console::new(quiet);
    let color = console.color();
    if !quiet {
        eprintln!(
            "nodecert {}: suite {} on {} ({}){}",
            env!("CARGO_PKG_VERSION"),
            crate::console::visible(&loaded.suite.name),
            crate::console::visible(&inv.hostname),
            crate::console::visible(&inv.summary()),
            if simrec.is_some() { " [SIMULATED]" } else { "" }
        );
    }
    let ev = crate::runner::new_evidence(&loaded, b.as_ref(), inv, simrec, environment(args));
    let ev = crate::runner::run(&loaded, b.as_mut(), ev, Some(&evidence_path), &mut console)
        .map_err(|e| Error::Write {
            path: evidence_path.clone(),
            source: e,
        })?;
    // A run that judged nothing is not signed unless the signer says so (--allow-incomplete).
    let refused = match (signer, ev.shortfall()) {
        (Some((_, false)), Some(v)) => Some(v),
        _ => None,
    };
    let signer = signer.filter(|_| refused.is_none()).map(|(s, _)| s);
    let signing = match signer {
        Some(s) => s.signing(out, &ev)?,
        None => Default::default(),
    };
    write_reports(&ev, &dir, templates, &signing)?;
    let signed = match signer {
        Some(s) => Some(s.sign(out)?),
        None => None,
    };
    let exported = export.write(&ev)?;
    if quiet {
        println!(
            "{}: {} ({})",
            ev.assess().label(),
            crate::console::visible(&ev.suite.name),
            if ev.simulated {
                "simulated"
            } else {
                "measured"
            }
        );
    } else {
        print!("{}", crate::console::summary(&ev, color));
        println!("evidence and reports in {}", out.display());
        for p in exported {
            println!("wrote {}", p.display());
        }
    }
    if let (Some(s), Some(info)) = (signer, signed) {
        let text = s.signed_text(out, &info, ev.simulated);
        match quiet {
            true => println!("{}", text.lines().next().unwrap_or_default()),
            false => print!("{text}"),
        }
    }
    if let Some(v) = refused {
        eprintln!(
            "error: not signed: {}; sign it anyway with `nodecert sign {} --key KEY --allow-incomplete`",
            ev.shortfall_text().unwrap_or_else(|| v.words().into()),
            out.display()
        );
    }
    Ok(exit_for(&ev))
}

/// The exit code of the run's verdict: 3 when a measurement failed (the node could not be
/// tested), else 1 on any failure, else 5 when the run did not finish, 6 when nothing was
/// judged, 0 on a pass.
pub fn exit_for(ev: &Evidence) -> u8 {
    ev.assess().exit_code()
}

pub fn write_reports(
    ev: &Evidence,
    dir: &Dir,
    templates: Option<&Path>,
    signing: &crate::report::Signing,
) -> Result<()> {
    let r = crate::report::render(ev, templates, signing).map_err(Error::Render)?;
    write_files(dir, [("report.html", r.html), ("report.md", r.markdown)])
}

/// Write each (name, body) into `dir`.
fn write_files<const N: usize>(dir: &Dir, files: [(&str, String); N]) -> Result<()> {
    for (name, body) in files {
        dir.replace(name.as_ref(), body.as_bytes())
            .map_err(|e| Error::Write {
                path: dir.path().join(name),
                source: e,
            })?;
    }
    Ok(())
}

/// An error of creating or opening a folder: the user's mistake (a file, a link, a name that
/// names no folder) is invalid input, anything else a failed write.
fn dir_error(path: &Path, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::InvalidInput | K::NotADirectory | K::AlreadyExists => {
            Error::Input(InputError::Other(format!("{}: {}", path.display(), e)))
        }
        _ => Error::Write {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

/// Lock the folder `dir` for this command, or say that another nodecert holds it.
fn lock_dir(d: Dir) -> Result<LockedDir> {
    let path = d.path().to_path_buf();
    d.lock().map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Input(InputError::Other(format!(
            "{}: another nodecert is writing to this folder (it holds the folder's lock); \
             wait for it to end or choose another folder",
            path.display()
        ))),
        _ => Error::Write { path, source: e },
    })
}

/// Create (when missing) and lock a folder for reports, refusing a signed one. Checked again
/// under the lock: a run that signed here meanwhile is not overwritten.
fn open_report_dir(out: &Path) -> Result<LockedDir> {
    let d = lock_dir(Dir::create_all(out).map_err(|e| dir_error(out, e))?)?;
    if d.exists(sign::MANIFEST_FILE.as_ref()).unwrap_or(true) {
        return Err(InputError::Other(format!(
            "{} holds a signed report ({}); refusing to write into it: choose another --out",
            out.display(),
            sign::MANIFEST_FILE
        ))
        .into());
    }
    Ok(d)
}

fn cmd_check(suite: &str, simulate: Option<String>) -> Result<u8> {
    let loaded = load::load(suite)?;
    let s = &loaded.suite;
    println!(
        "suite {} ({}), sha256 {}",
        s.name, loaded.origin, loaded.sha256
    );
    if loaded.chain.len() > 1 {
        println!(
            "extends: {}",
            loaded
                .chain
                .iter()
                .skip(1)
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
                .join(" -> ")
        );
    }
    println!("valid.");
    // Expand against a node: the simulated one if given, else the suite's own expectations.
    let simulated = simulate.is_some();
    let inv = match simulate {
        Some(spec) => {
            let mut b = SimBackend::new(sim::load_node(&spec)?, vec![], 1)?;
            b.inventory()?
        }
        None => expected_inventory(s),
    };
    println!("plan on {} ({}):", inv.hostname, inv.summary());
    let ctx = crate::checks::Ctx {
        suite: s,
        inventory: &inv,
        earlier: &[],
        simulated,
    };
    for (i, c) in crate::checks::from_suite(&loaded).iter().enumerate() {
        match c.plan(&ctx) {
            Ok(lines) => {
                println!("  {}. {} [{}]", i + 1, c.title(), c.id());
                for l in lines {
                    println!("       {l}");
                }
            }
            Err(why) => println!(
                "  {}. {} [{}]: will be skipped: {why}",
                i + 1,
                c.title(),
                c.id()
            ),
        }
    }
    Ok(exit::PASS)
}

/// A node shaped as the suite expects, for `check` without a node.
fn expected_inventory(s: &crate::suite::Suite) -> crate::inventory::Inventory {
    let n = s.node.gpu_count.unwrap_or(1);
    let gpus = (0..n)
        .map(|i| crate::inventory::Gpu {
            index: i,
            name: s.node.gpu_model.clone().unwrap_or_else(|| "GPU".into()),
            ..Default::default()
        })
        .collect();
    let pairs = (0..n)
        .flat_map(|a| ((a + 1)..n).map(move |b| (a, b)))
        .map(|(a, b)| crate::inventory::GpuPair {
            a,
            b,
            nvlinks: s.topology.expected_links(a, b).unwrap_or(0),
            ..Default::default()
        })
        .collect();
    crate::inventory::Inventory {
        hostname: "the expected node".into(),
        gpus,
        pairs,
        ..Default::default()
    }
}

fn cmd_inventory(
    simulate: Option<String>,
    json: bool,
    as_suite: Option<&Path>,
    force: bool,
) -> Result<u8> {
    if let Some(path) = as_suite.filter(|p| *p != Path::new("-")) {
        let refuse = |why: String| -> Result<u8> {
            Err(InputError::Other(format!("--as-suite {}: {why}", path.display())).into())
        };
        if let Err(why) = crate::fsio::write::check_target(path) {
            return refuse(why.to_string());
        }
        if path.symlink_metadata().is_ok() && !force {
            return refuse(
                "exists; a frozen suite is never replaced silently: add --force to replace it"
                    .into(),
            );
        }
    }
    let (mut b, simrec) = backend(simulate.as_deref(), &[], 1)?;
    let inv = b.inventory()?;
    if let (Some(_), false) = (as_suite, inv.lost_gpus.is_empty()) {
        // The suite would expect the broken shape, and its per-GPU lists would be shifted.
        let lost: Vec<String> = inv.lost_gpus.iter().map(|l| l.label()).collect();
        eprintln!(
            "error: not freezing this node: {} fell off the bus, and a suite written now would \
             expect the node without it; reset or repair the GPU first (`nodecert inventory` \
             lists it)",
            lost.join(", ")
        );
        return Ok(exit::CHECK_FAILED);
    }
    if let Some(path) = as_suite {
        let text = crate::suite::freeze::suite_from_inventory(&inv, simrec.is_some());
        if path == Path::new("-") {
            print!("{text}");
        } else {
            crate::fsio::write::replace(path, text.as_bytes()).map_err(|e| Error::Write {
                path: path.to_path_buf(),
                source: e,
            })?;
            println!("wrote a suite that expects this node: {}", path.display());
        }
    } else if json {
        let v = serde_json::json!({ "simulated": simrec.is_some(), "inventory": inv });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", crate::inventory_text::render(&inv, simrec.is_some()));
    }
    Ok(exit::PASS)
}

fn cmd_render(
    evidence: &Path,
    out: Option<PathBuf>,
    templates: Option<&Path>,
    export: &ExportArgs,
) -> Result<u8> {
    let path = Evidence::path_in(evidence);
    let out = out.unwrap_or_else(|| {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    });
    if out.join(sign::MANIFEST_FILE).exists() {
        return Err(InputError::Other(format!(
            "{} holds a signed report; rendering into it would break its signature: choose another --out",
            out.display()
        ))
        .into());
    }
    export.check(&out, Some(&path))?;
    let (_, ev) = read_evidence(evidence)?;
    let dir = open_report_dir(&out)?;
    write_reports(&ev, &dir, templates, &Default::default())?;
    println!(
        "rendered {} and {}",
        out.join("report.html").display(),
        out.join("report.md").display()
    );
    for p in export.write(&ev)? {
        println!("wrote {}", p.display());
    }
    if let Some(t) = ev.shortfall_text() {
        eprintln!("{}: {t}", ev.assess().label());
    }
    // As the run itself exits: a re-rendered failure or incomplete run is still one.
    Ok(exit_for(&ev))
}

pub fn list_text() -> String {
    let mut s = String::from("Embedded suites:\n");
    for (name, _) in load::EMBEDDED {
        let d = load::load(name)
            .map(|l| l.suite.description)
            .unwrap_or_default();
        s.push_str(&format!("  {name:<18} {d}\n"));
    }
    s.push_str("\nSimulated nodes (--simulate NAME):\n");
    for (name, _) in sim::EMBEDDED {
        let d = sim::load_node(name)
            .map(|n| n.description)
            .unwrap_or_default();
        s.push_str(&format!("  {name:<18} {d}\n"));
    }
    s.push_str("\nFaults (--inject NAME[:key=value,...]):\n");
    for k in sim::FaultKind::ALL {
        s.push_str(&format!("  {:<20} {}\n", k.name(), k.describe()));
    }
    s
}

/// A tiny evidence used to try user templates before a run.
fn sample_evidence_for_templates() -> Evidence {
    let loaded = load::load("h200-vm-1").expect("embedded suite loads");
    let mut b = SimBackend::new(
        sim::load_node("h200-vm-1").expect("embedded node loads"),
        vec![],
        1,
    )
    .expect("valid");
    let inv = b.inventory().expect("simulated inventory");
    // Recorded like any simulated run: an embedded template the user's folder does not override
    // reads `ev.simulation` whenever the evidence is simulated.
    let rec = SimulationRecord {
        node: "h200-vm-1".into(),
        seed: 1,
        faults: vec![],
    };
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent)
        .expect("no io without a path")
}

/// A signing key, checked before any work is done, and the identity it signs as.
pub struct Signer {
    key: PathBuf,
    fingerprint: String,
    identity: String,
}

impl Signer {
    fn open(key: &Path, identity: Option<String>) -> Result<Signer> {
        let (fingerprint, comment) = sign::signing_key_info(key).map_err(sign_error)?;
        let identity = match identity {
            Some(id) if !sign::is_valid_identity(&id) => {
                return Err(InputError::Other(format!(
                    "--signer-id {id:?}: must be non-empty, without white space, quotes, commas or * ? !"
                ))
                .into())
            }
            Some(id) => id,
            None if sign::is_valid_identity(&comment) => comment,
            None => DEFAULT_SIGNER.to_string(),
        };
        Ok(Signer {
            key: key.to_path_buf(),
            fingerprint,
            identity,
        })
    }

    /// What the reports say about the signature to come: key, evidence digest, verify command.
    fn signing(&self, out: &Path, ev: &Evidence) -> Result<crate::report::Signing> {
        let evidence = out.join(sign::EVIDENCE_FILE);
        let digest = sign::sha256_file(&evidence).map_err(|e| Error::Write {
            path: evidence,
            source: e,
        })?;
        Ok(crate::report::Signing {
            fingerprint: Some(self.fingerprint.clone()),
            evidence_sha256: Some(digest),
            verify_command: Some(sign::verify_command(
                &out.display().to_string(),
                &self.identity,
            )),
            signed_as: ev.shortfall().map(|v| format!("signed as {}", v.words())),
        })
    }

    fn sign(&self, dir: &Path) -> Result<sign::SignatureInfo> {
        sign::sign_dir(dir, &self.key).map_err(sign_error)
    }

    /// What was signed, and how anyone can check it.
    fn signed_text(&self, dir: &Path, info: &sign::SignatureInfo, simulated: bool) -> String {
        let d = dir.display().to_string();
        let sig = info
            .signature
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let mut s = format!(
            "{} {d} as {} ({}): {}\n",
            if info.countersignature {
                "countersigned"
            } else {
                "signed"
            },
            self.identity,
            self.fingerprint,
            info.signature.display()
        );
        if simulated {
            s.push_str("SIMULATED RESULTS: the signature seals simulated figures; not a certification of real hardware\n");
        }
        match sign::allowed_signers_line(&self.key, &self.identity) {
            Ok(line) => s.push_str(&format!(
                "allowed_signers line (give it to whoever verifies):\n  {line}\n\
                 verify with nodecert (line saved in a file named allowed_signers):\n  \
                 nodecert verify {d} --allowed-signers allowed_signers\n\
                 or with OpenSSH and coreutils only:\n  {}\n  {}\n",
                sign::verify_command_for(&d, &self.identity, &sig),
                sign::digest_check_command(&d)
            )),
            Err(e) => s.push_str(&format!("cannot print the allowed_signers line: {e}\n")),
        }
        s
    }
}

/// Errors of signing: unreadable inputs are invalid input, broken reports fail verification,
/// failed writes mean the node's run could not be completed.
fn sign_error(e: sign::SignError) -> Error {
    use sign::SignError as S;
    match e {
        S::Io {
            action,
            path,
            source,
        } if !(action.starts_with("read") || action == "list") => Error::Write { path, source },
        S::NotSignable { .. } | S::Manifest { .. } | S::Evidence { .. } => {
            Error::Verify(e.to_string())
        }
        e => Error::Input(InputError::Other(e.to_string())),
    }
}

fn cmd_keygen(out: &Path, comment: &str) -> Result<u8> {
    let info = sign::keygen(out, comment).map_err(sign_error)?;
    let identity = if sign::is_valid_identity(comment) {
        comment
    } else {
        DEFAULT_SIGNER
    };
    let line = sign::allowed_signers_line(&info.public_key, identity).map_err(sign_error)?;
    println!(
        "wrote {} (private key, mode 0600; keep it secret) and {}",
        info.private_key.display(),
        info.public_key.display()
    );
    println!("fingerprint: {}", info.fingerprint);
    println!("allowed_signers line:\n  {line}");
    println!(
        "sign a run with: nodecert run ... --sign-key {}",
        info.private_key.display()
    );
    Ok(exit::PASS)
}

fn cmd_verify(dir: &Path, allowed: Option<PathBuf>, pubkey: Option<PathBuf>) -> Result<u8> {
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
    print!("{r}");
    let sim = if r.simulated == Some(true) {
        " (SIMULATED RESULTS: not a certification of real hardware)"
    } else {
        ""
    };
    if r.ok() {
        println!("VERIFIED{sim}");
        return Ok(exit::PASS);
    }
    println!("NOT VERIFIED{sim}");
    let why = if r.problems.is_empty() {
        "see above".to_string()
    } else {
        r.problems.join("; ")
    };
    eprintln!("error: verification failed: {why}");
    if untrusted {
        eprintln!("hint: say whom you trust with --allowed-signers FILE or --pubkey KEY.pub");
    }
    Ok(exit::VERIFY_FAILED)
}

fn cmd_sign(dir: &Path, signer: &Signer, allow_incomplete: bool) -> Result<u8> {
    if !dir.is_dir() {
        return Err(InputError::Other(format!("{}: not a report folder", dir.display())).into());
    }
    // No other nodecert writes here while the signature is made.
    let lock = lock_dir(Dir::open(dir).map_err(|e| dir_error(dir, e))?)?;
    // Read as render does: a file whose records disagree (simulated) is refused here.
    let (_, ev) = read_evidence(dir)?;
    if let Some(v) = ev.shortfall() {
        let why = ev.shortfall_text().unwrap_or_else(|| v.words().into());
        if !allow_incomplete {
            return Err(Error::Refused {
                message: format!(
                    "not signing {}: {why}; a signature would certify what was never checked \
                     (sign it as {} with --allow-incomplete)",
                    dir.display(),
                    v.words()
                ),
                code: v.exit_code(),
            });
        }
        if dir.join(sign::MANIFEST_FILE).exists() {
            eprintln!(
                "warning: {} is already signed, so its reports cannot be rendered again: their \
                 title may not say that this run is {}",
                dir.display(),
                v.words()
            );
        } else {
            // The first signature: the reports are rendered again, titled "signed as ...".
            let signing = signer.signing(dir, &ev)?;
            write_reports(&ev, &lock, None, &signing)?;
        }
    }
    let info = signer.sign(dir)?;
    let simulated = crate::fsio::read::open(&info.manifest, false)
        .and_then(|f| crate::fsio::read::read_limited(f, 4 << 20, "a manifest"))
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| sign::Manifest::parse(&t).ok())
        .is_some_and(|m| m.simulated);
    print!("{}", signer.signed_text(dir, &info, simulated));
    Ok(exit::PASS)
}

/// Read evidence given as a file or as a report folder holding evidence.json.
fn read_evidence(p: &Path) -> Result<(PathBuf, Evidence)> {
    let path = Evidence::path_in(p);
    let ev = Evidence::read(&path).map_err(|e| Error::Input(InputError::Other(e)))?;
    Ok((path, ev))
}

fn cmd_diff(old: &Path, new: &Path, out: &Path, tolerance_pct: f64) -> Result<u8> {
    if !(tolerance_pct.is_finite() && (0.0..100.0).contains(&tolerance_pct)) {
        return Err(InputError::Other(format!(
            "--tolerance-pct must be at least 0 and below 100, got {tolerance_pct}"
        ))
        .into());
    }
    let (old_path, o) = read_evidence(old)?;
    let (new_path, n) = read_evidence(new)?;
    let mut d = crate::diff::compare(&o, &n, tolerance_pct);
    d.old.source = old_path.display().to_string();
    d.new.source = new_path.display().to_string();
    let r = crate::report::render_diff(&d).map_err(Error::Render)?;
    let dir = open_report_dir(out)?;
    write_files(&dir, [("diff.html", r.html), ("diff.md", r.markdown)])?;
    print!("{}", diff_summary(&d));
    println!(
        "wrote {} and {}",
        out.join("diff.md").display(),
        out.join("diff.html").display()
    );
    Ok(if d.regressed {
        exit::CHECK_FAILED
    } else {
        exit::PASS
    })
}

/// The console summary of a diff; long lists are cut (the files have everything).
pub fn diff_summary(d: &crate::diff::Diff) -> String {
    const MAX: usize = 30;
    fn section(s: &mut String, title: String, lines: Vec<String>) {
        s.push_str(&format!("{title}: {}\n", lines.len()));
        for l in lines.iter().take(MAX) {
            s.push_str(&format!("  {l}\n"));
        }
        if lines.len() > MAX {
            s.push_str(&format!(
                "  ... and {} more (see diff.md)\n",
                lines.len() - MAX
            ));
        }
    }
    let mut s = String::new();
    if d.simulated {
        s.push_str("SIMULATED RESULTS: not a certification of real hardware\n");
    }
    for (tag, side) in [("old", &d.old), ("new", &d.new)] {
        s.push_str(&format!(
            "{tag}: {} (suite {} on {}, {}, {}{})\n",
            side.source,
            side.suite,
            side.hostname,
            side.started_at,
            side.verdict,
            if side.simulated { ", SIMULATED" } else { "" }
        ));
    }
    if !d.renumbered.is_empty() {
        let moves: Vec<String> = d
            .renumbered
            .iter()
            .map(|r| format!("old GPU {} is now GPU {}", r.old, r.new))
            .collect();
        s.push_str(&format!(
            "GPUs renumbered (matched by identity; compared GPU by GPU, named in the new numbering): {}\n",
            moves.join(", ")
        ));
    }
    let worse = |w: bool| if w { " (worse)" } else { "" };
    section(
        &mut s,
        "hardware changes".into(),
        d.hardware
            .iter()
            .map(|h| {
                format!(
                    "{}: {} {} -> {}{}",
                    h.subject,
                    h.what,
                    h.old,
                    h.new,
                    worse(h.worse)
                )
            })
            .collect(),
    );
    section(
        &mut s,
        format!(
            "metrics worse by more than {}% (of {} compared)",
            d.tolerance_pct, d.metrics_compared
        ),
        d.regressions.iter().map(|c| c.describe()).collect(),
    );
    section(
        &mut s,
        "verdicts changed".into(),
        d.verdicts
            .iter()
            .map(|v| format!("{}{}", v.describe(), worse(v.worse)))
            .collect(),
    );
    if !d.improvements.is_empty() {
        s.push_str(&format!(
            "metrics better by more than {}%: {}\n",
            d.tolerance_pct,
            d.improvements.len()
        ));
    }
    s.push_str(if d.regressed {
        "result: REGRESSED\n"
    } else {
        "result: NO REGRESSION\n"
    });
    s
}
