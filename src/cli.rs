//! The command line.

use crate::backend::sim::{self, Fault, SimBackend};
use crate::backend::Backend;
use crate::error::{exit, Error, InputError, Result};
use crate::evidence::{Environment, Evidence, SimulationRecord, Status};
use crate::suite::load::{self, LoadedSuite};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

const EXIT_CODES: &str = "\
Exit codes:
  0  every check passed (warnings and skips allowed)
  1  a check failed
  2  invalid input: suite, node description, flags or evidence
  3  the node could not be tested: no driver, no GPU, a hardware or runtime error
  4  a signature or digest did not verify";

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
        #[arg(long)]
        json: bool,
    },
    /// Render the reports again from an evidence file.
    #[command(after_help = EXIT_CODES)]
    Render {
        /// evidence.json (or a report folder that holds one).
        evidence: PathBuf,
        /// Folder for report.html and report.md (default: beside the evidence).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        templates: Option<PathBuf>,
    },
    /// List the embedded suites, simulated nodes and faults.
    List,
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
    match dispatch(cli, &args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            if matches!(e, Error::Hardware(_)) {
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
        } => cmd_run(
            suite,
            sim.simulate,
            inject,
            seed,
            &out,
            templates.as_deref(),
            quiet,
            args,
        ),
        Command::Check { suite, sim } => cmd_check(&suite, sim.simulate),
        Command::Inventory { sim, json } => cmd_inventory(sim.simulate, json),
        Command::Render {
            evidence,
            out,
            templates,
        } => cmd_render(&evidence, out, templates.as_deref()),
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
    args: &[String],
) -> Result<u8> {
    // Validate what the user gave before touching hardware.
    let pre_loaded = match &suite {
        Some(s) => Some(load::load(s)?),
        None => None,
    };
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
    std::fs::create_dir_all(out).map_err(|e| Error::Write {
        path: out.to_path_buf(),
        source: e,
    })?;
    let evidence_path = out.join("evidence.json");
    let mut console = crate::console::Console::new(quiet);
    let color = console.color();
    if !quiet {
        eprintln!(
            "nodecert {}: suite {} on {} ({}){}",
            env!("CARGO_PKG_VERSION"),
            loaded.suite.name,
            inv.hostname,
            inv.summary(),
            if simrec.is_some() { " [SIMULATED]" } else { "" }
        );
    }
    let ev = crate::runner::new_evidence(&loaded, b.as_ref(), inv, simrec, environment(args));
    let ev = crate::runner::run(&loaded, b.as_mut(), ev, Some(&evidence_path), &mut console)
        .map_err(|e| Error::Write {
            path: evidence_path.clone(),
            source: e,
        })?;
    write_reports(&ev, out, templates)?;
    if quiet {
        println!(
            "{}: {} ({})",
            ev.overall().label(),
            ev.suite.name,
            if ev.simulated {
                "simulated"
            } else {
                "measured"
            }
        );
    } else {
        print!("{}", crate::console::summary(&ev, color));
        println!("evidence and reports in {}", out.display());
    }
    Ok(exit_for(&ev))
}

/// 3 when a measurement failed (the node could not be tested), else 1 on any failure.
pub fn exit_for(ev: &Evidence) -> u8 {
    match ev.worst() {
        Status::Error => exit::NODE_UNTESTABLE,
        Status::Fail => exit::CHECK_FAILED,
        _ => exit::PASS,
    }
}

pub fn write_reports(ev: &Evidence, out: &Path, templates: Option<&Path>) -> Result<()> {
    let r = crate::report::render(ev, templates, &Default::default()).map_err(Error::Render)?;
    for (name, body) in [("report.html", r.html), ("report.md", r.markdown)] {
        let p = out.join(name);
        crate::evidence::write_atomic(&p, body.as_bytes())
            .map_err(|e| Error::Write { path: p, source: e })?;
    }
    Ok(())
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
    };
    for (i, c) in crate::checks::from_suite(s).iter().enumerate() {
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

fn cmd_inventory(simulate: Option<String>, json: bool) -> Result<u8> {
    let (mut b, simrec) = backend(simulate.as_deref(), &[], 1)?;
    let inv = b.inventory()?;
    if json {
        let v = serde_json::json!({ "simulated": simrec.is_some(), "inventory": inv });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", crate::inventory_text::render(&inv, simrec.is_some()));
    }
    Ok(exit::PASS)
}

fn cmd_render(evidence: &Path, out: Option<PathBuf>, templates: Option<&Path>) -> Result<u8> {
    let path = if evidence.is_dir() {
        evidence.join("evidence.json")
    } else {
        evidence.to_path_buf()
    };
    let ev = Evidence::read(&path).map_err(|e| Error::Input(InputError::Other(e)))?;
    let out = out.unwrap_or_else(|| {
        path.parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    });
    std::fs::create_dir_all(&out).map_err(|e| Error::Write {
        path: out.clone(),
        source: e,
    })?;
    write_reports(&ev, &out, templates)?;
    println!(
        "rendered {} and {}",
        out.join("report.html").display(),
        out.join("report.md").display()
    );
    Ok(exit::PASS)
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
    let ev = crate::runner::new_evidence(&loaded, &b, inv, None, Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent)
        .expect("no io without a path")
}
