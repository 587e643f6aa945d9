//! `nodecert fleet ...`: certify many nodes through the schedulers users already run, gather
//! their evidence into one report, and drain the bad nodes.

use super::output::{open_report_dir, write_files};
use super::signer::Signer;
use crate::error::{exit, Error, InputError, Result};
use crate::fleet::{self, gather, FleetReport};
use crate::sign::Trust;
use sha2::Digest;
use std::path::{Path, PathBuf};

fn input(msg: impl Into<String>) -> Error {
    Error::Input(InputError::Other(msg.into()))
}

use fleet::FILES as FLEET_FILES;

/// Check the outlier margin given.
fn outlier_pct(p: f64) -> Result<f64> {
    if p.is_finite() && p > 0.0 && p < 100.0 {
        Ok(p)
    } else {
        Err(input(format!(
            "--outlier-pct must be above 0 and below 100, got {p}"
        )))
    }
}

/// What `fleet report` wrote.
pub struct Written {
    pub report: FleetReport,
    /// The signature made, when a signer was given and the verdict may be signed.
    pub signed: Option<crate::sign::SignatureInfo>,
    /// A signer was given but the fleet was not signed: part of it was never judged, and
    /// `--allow-incomplete` was not given.
    pub refused: bool,
}

/// What the user says the fleet must be, over what its shared folders' node lists say.
#[derive(Debug, Default, Clone, Copy)]
pub struct Expected<'a> {
    /// The nodes that must have reported, as a host list (`--expect`).
    pub nodes: Option<&'a str>,
    /// The suite every node must have run, by name (`--suite`).
    pub suite: Option<&'a str>,
}

/// Read every node, judge the fleet, and write its report into `out`; with `signer`, sign the
/// folder (a fleet part of which was never judged only with its `allow_incomplete`).
pub fn report(
    inputs: &[PathBuf],
    out: &Path,
    expected: Expected<'_>,
    pct: f64,
    trust: &Trust,
    signer: Option<(&Signer, bool)>,
) -> Result<Written> {
    let pct = outlier_pct(pct)?;
    if let Some(name) = expected.suite {
        fleet::gather::check_suite_name(name).map_err(|e| input(format!("--suite {e}")))?;
    }
    let expect = match expected.nodes {
        Some(list) => {
            let mut e =
                fleet::hostlist::expand(list).map_err(|e| input(format!("--expect {e}")))?;
            e.sort_by(|a, b| fleet::natural_cmp(a, b));
            e.dedup();
            Some(e)
        }
        None => None,
    };
    // The output folder's lock before anything is read (the nodes, a node list, an earlier
    // report beside them): a second `fleet report` into the same folder is turned away before
    // it reads, instead of writing there what it read while the first was writing.
    let created = std::fs::symlink_metadata(out).is_err();
    let dir = open_report_dir(out, Some(crate::sign::ReportKind::Fleet))?;
    // The fleet's own files there are nodecert's or refused, before anything is read: a
    // folder chosen by mistake keeps its files.
    super::output::check_own_files_beside(&dir, out, FLEET_FILES[0], &FLEET_FILES, None)?;
    let written = report_in(
        &dir,
        inputs,
        out,
        (expect, expected.suite),
        pct,
        trust,
        signer,
    );
    if written.is_err() && created {
        // Nothing was written: the folder this call made (empty) goes again.
        let _ = std::fs::remove_dir(out);
    }
    written
}

/// [`report`] into the folder `dir` (at `out`), already locked.
fn report_in(
    dir: &crate::fsio::write::LockedDir,
    inputs: &[PathBuf],
    out: &Path,
    (expect, given_suite): (Option<Vec<String>>, Option<&str>),
    pct: f64,
    trust: &Trust,
    signer: Option<(&Signer, bool)>,
) -> Result<Written> {
    let gather::Found {
        folders,
        mut expected,
        job,
        suite,
        suite_sha256,
    } = gather::find(inputs).map_err(input)?;
    if let Some(e) = expect {
        expected = e;
    }
    // The job's suite: as its node list recorded it, or as given; two names are two jobs.
    let suite = match (suite, given_suite) {
        (Some(listed), Some(given)) if listed != given => {
            return Err(input(format!(
                "--suite {}: the job's node list says its nodes ran suite {}",
                crate::console::visible(given),
                crate::console::visible(&listed)
            )))
        }
        (listed, given) => listed.or(given.map(str::to_string)),
    };
    if folders.is_empty() && expected.is_empty() {
        return Err(input(format!(
            "no node folders found in {}: give nodes' report folders, or the shared folder the fleet job wrote",
            inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Refuse to read the output folder as a node: it exists now (locked), whatever path names it.
    let folders: Vec<&gather::NodeFolder> = folders
        .iter()
        .filter(|f| !is_folder(&f.path, dir.path()))
        .collect();
    // One node at a time: only its summary is kept, its figures' names shared with the fleet.
    // A reader thread parses (each node's evidence is megabytes of short-lived allocations, in
    // that thread's own heap arena); this thread keeps a copy of each summary in its own heap,
    // so the summaries are not scattered among the pages of freed evidence and the memory held
    // grows only by what they are (see ci/bench_fleet.py).
    let summaries: Vec<gather::NodeSummary> = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        scope.spawn(move || {
            let mut keys = gather::Keys::default();
            for f in folders {
                if tx.send(gather::read_node(f, trust, &mut keys)).is_err() {
                    break;
                }
            }
        });
        // The copy is the point: it is allocated here, in this thread's heap.
        #[allow(clippy::map_clone)]
        let kept = rx.into_iter().map(|s| s.clone()).collect();
        kept
    });
    let mut summaries = summaries;
    if let Some(id) = &job {
        fleet::judge::for_job(&mut summaries, id);
    }
    if let Some(name) = &suite {
        fleet::judge::for_suite(&mut summaries, name, suite_sha256.as_deref());
    }
    let mut r = fleet::judge::judge(summaries, &expected, pct);
    r.job = job;
    r.suite = suite;
    r.suite_sha256 = suite_sha256;
    let json = serde_json::to_string_pretty(&r).map_err(|e| input(e.to_string()))? + "\n";
    let refused = signer.is_some_and(|(_, allow)| r.verdict.is_shortfall() && !allow);
    let signer = signer.filter(|_| !refused).map(|(s, _)| s);
    // The pages say who signs and the digest of fleet.json, known before it is written; the
    // signature is of that fleet.json or of nothing.
    let checked = hex::encode(sha2::Sha256::digest(json.as_bytes()));
    let signing = match signer {
        Some(s) => s.signing_of(out, checked.clone(), signed_as(&r)),
        None => Default::default(),
    };
    let pages = fleet::render::render(&r, &signing).map_err(Error::Render)?;
    write_files(
        dir,
        [
            (FLEET_FILES[0], json),
            (FLEET_FILES[3], fleet::export::junit(&r)),
            (FLEET_FILES[4], fleet::export::prometheus(&r)),
        ],
    )?;
    let write_pages = |p: crate::report::Rendered| {
        write_files(
            dir,
            [(FLEET_FILES[1], p.html), (FLEET_FILES[2], p.markdown)],
        )
    };
    let signed = match signer {
        None => {
            write_pages(pages)?;
            None
        }
        Some(s) => match write_pages(pages).and_then(|()| s.sign(dir, &checked)) {
            Ok(info) => Some(info),
            Err(e) => {
                // Nothing was signed: no page may name the signature. They are rendered again
                // without it, or removed where that fails (the error told is the signature's).
                let unsigned = fleet::render::render(&r, &Default::default())
                    .map_err(|_| ())
                    .and_then(|p| write_pages(p).map_err(|_| ()));
                if unsigned.is_err() {
                    for name in [FLEET_FILES[1], FLEET_FILES[2]] {
                        let _ = dir.remove(name.as_ref());
                    }
                }
                return Err(e);
            }
        },
    };
    Ok(Written {
        report: r,
        signed,
        refused,
    })
}

/// Whether `path` is the folder `folder` itself (not a link to it: a link is refused when read).
fn is_folder(path: &Path, folder: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(path), std::fs::metadata(folder)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The console lines of a fleet report.
pub fn summary(r: &FleetReport, out: &Path) -> String {
    use crate::console::visible;
    let mut s = String::new();
    if r.simulated {
        s.push_str("SIMULATED RESULTS: not a certification of real hardware\n");
    }
    s.push_str(&format!(
        "{}fleet: {} of {} nodes: {}\n",
        if r.simulated { "[SIMULATED] " } else { "" },
        r.verdict.label(),
        r.nodes.len(),
        r.counts_text()
    ));
    for a in &r.actions {
        s.push_str(&format!(
            "  {} {}: {}\n",
            a.action,
            visible(&a.node),
            visible(&a.reason)
        ));
    }
    s.push_str(&format!(
        "fleet report in {} (fleet.html, fleet.md, fleet.json)\n",
        out.display()
    ));
    // Each line of a fleet that holds a simulated node says so.
    crate::console::tag_lines(&s, r.simulated)
}

pub fn cmd_report(
    inputs: &[PathBuf],
    out: &Path,
    expected: Expected<'_>,
    pct: f64,
    trust: &Trust,
    signer: Option<(&Signer, bool)>,
) -> Result<u8> {
    let w = report(inputs, out, expected, pct, trust, signer)?;
    let r = &w.report;
    crate::out!("{}", summary(r, out));
    if let (Some((s, _)), Some(info)) = (signer, &w.signed) {
        crate::out!("{}", s.signed_text(out, info, r.simulated));
        crate::outln!("{}", crate::console::visible(&r.signature_scope()));
        if let Some(hint) = unchecked_hint(r) {
            crate::errln!("{hint}");
        }
    }
    if w.refused {
        crate::errln!("error: {}", not_signed(r, out));
    }
    Ok(r.verdict.exit_code())
}

/// How to verify the nodes' own signatures, when some were read without a trusted signer.
fn unchecked_hint(r: &FleetReport) -> Option<String> {
    let unchecked = fleet::Certificates::of(&r.nodes).signer_not_checked;
    (unchecked > 0).then(|| {
        format!(
            "hint: {unchecked} node report{} signed, but no signer was checked: give \
             --allowed-signers FILE or --pubkey KEY.pub to verify them",
            if unchecked == 1 { " is" } else { "s are" }
        )
    })
}

/// What the title of a fleet part of which was never judged says once signed: "signed as not
/// tested".
fn signed_as(r: &FleetReport) -> Option<String> {
    r.verdict
        .is_shortfall()
        .then(|| format!("signed as {}", r.verdict.label().to_lowercase()))
}

/// Why a fleet was not signed, and how to sign it anyway.
fn not_signed(r: &FleetReport, out: &Path) -> String {
    format!(
        "not signed: the fleet is {} ({}); a signature would certify what was never checked; \
         sign it anyway with `nodecert sign {} --key KEY --allow-incomplete`",
        r.verdict.label().to_lowercase(),
        r.counts_text(),
        crate::console::visible(&out.display().to_string())
    )
}

/// `nodecert sign` on a fleet report's folder: the fleet must be one the signer may sign. The
/// first signature renders the pages again, as `fleet report --sign-key` writes them: they name
/// the signer, say what the signature vouches for and, for a fleet part of which was never
/// judged (`allow_incomplete`), "signed as not tested".
pub fn cmd_sign(dir: &Path, signer: &Signer, allow_incomplete: bool) -> Result<u8> {
    // The lock first, then fleet.json: a `fleet report` writing here is not read half-done.
    let lock = super::output::lock_dir(
        crate::fsio::write::Dir::open_trusted(dir).map_err(|e| super::output::dir_error(dir, e))?,
    )?;
    // fleet.json through the folder held, whatever its path names meanwhile, never through a
    // link: what is judged signable is what is signed beside it.
    let path = dir.join(fleet::FLEET_FILE);
    let text = lock
        .read_to_string(fleet::FLEET_FILE.as_ref(), crate::fsio::read::Kind::Fleet)
        .map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    let (r, text) = FleetReport::from_text(&path, text).map_err(input)?;
    if r.verdict.is_shortfall() && !allow_incomplete {
        return Err(Error::Refused {
            message: not_signed(&r, dir),
            code: r.verdict.exit_code(),
        });
    }
    let signed_as = signed_as(&r);
    // What was judged signable is the bytes signed, or nothing is.
    let checked = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    // The first signature is the one made where no signature is: a manifest already there
    // seals nothing and is written again, over the fleet report's files.
    let first = crate::sign::signatures_in_folder(&lock)
        .map_err(super::signer::sign_error)?
        .is_empty();
    if !first && signed_as.is_some() {
        crate::errln!(
            "warning: {} is already signed, so its pages cannot be rendered again: their \
             title may not say that this fleet is {}",
            crate::console::visible(&dir.display().to_string()),
            r.verdict.label().to_lowercase()
        );
    }
    // The first signature writes every file of the report again from the fleet.json it judged
    // (the pages to name it; the JUnit and Prometheus files, which CI and monitoring read, as
    // they are): whatever was found here, what is sealed says what fleet.json does. As they were
    // before, they (and an unsigned manifest found here) are put back, or removed where there
    // were none, if it then fails.
    let pages = [
        FLEET_FILES[1],
        FLEET_FILES[2],
        FLEET_FILES[3],
        FLEET_FILES[4],
    ];
    let saved = first
        .then(|| {
            super::output::keep_for_first_signature(
                &lock,
                dir,
                &pages,
                crate::fsio::read::Kind::Fleet,
                "the fleet report's files",
            )
        })
        .transpose()?;
    let signed = (|| {
        if first {
            let signing = signer.signing_of(dir, checked.clone(), signed_as);
            let p = fleet::render::render(&r, &signing).map_err(Error::Render)?;
            write_files(
                &lock,
                [
                    (pages[0], p.html),
                    (pages[1], p.markdown),
                    (pages[2], fleet::export::junit(&r)),
                    (pages[3], fleet::export::prometheus(&r)),
                ],
            )?;
        }
        signer.sign(&lock, &checked)
    })();
    let info = super::output::restore_on_error(saved, &lock, signed)?;
    crate::out!("{}", signer.signed_text(dir, &info, r.simulated));
    crate::outln!("{}", crate::console::visible(&r.signature_scope()));
    Ok(exit::PASS)
}

/// Run a simulated fleet and report on it; with `fabric`, its nodes run at once, one process
/// each, and measure the fabric together over loopback (`run --fabric`).
#[allow(clippy::too_many_arguments)]
pub fn cmd_simulate(
    nodes: u32,
    node: &str,
    suite: Option<String>,
    inject: &[String],
    out: &Path,
    pct: f64,
    fabric: bool,
    args: &[String],
) -> Result<u8> {
    if fabric && !(2..=MAX_FABRIC_PROCESSES).contains(&nodes) {
        return Err(input(format!(
            "--fabric: --nodes must be 2 to {MAX_FABRIC_PROCESSES} (one process each on this machine), got {nodes}"
        )));
    }
    if !(1..=fleet::gather::MAX_NODES as u32).contains(&nodes) {
        return Err(input(format!(
            "--nodes must be 1 to {}, got {nodes}",
            fleet::gather::MAX_NODES
        )));
    }
    outlier_pct(pct)?;
    let names = fleet::simulate::names(nodes);
    let mut faults: Vec<(String, String)> = Vec::new();
    for spec in inject {
        let (n, f) = fleet::simulate::parse_inject(spec).map_err(input)?;
        if !names.contains(&n) {
            return Err(input(format!(
                "--inject {spec:?}: no node {n} in this fleet ({} to {})",
                names[0],
                names[names.len() - 1]
            )));
        }
        faults.push((n, f));
    }
    let fleet_out = out.join("fleet");
    crate::errln!(
        "nodecert fleet simulate: {nodes} simulated {node} nodes into {} [SIMULATED]",
        out.display()
    );
    if fabric {
        run_fabric(&names, node, suite.as_deref(), &faults, out)?;
    }
    for (i, name) in names.iter().enumerate().filter(|_| !fabric) {
        let mine: Vec<String> = faults
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect();
        crate::out!("{name}: ");
        super::run::cmd_run(
            suite.clone(),
            Some(node.to_string()),
            mine,
            i as u64 + 1,
            Some(name.clone()),
            false,
            &out.join(name),
            None,
            true,
            None,
            &Default::default(),
            args,
        )?;
    }
    let r = report(
        &[out.to_path_buf()],
        &fleet_out,
        Expected::default(),
        pct,
        &Trust::Untrusted,
        None,
    )?
    .report;
    crate::out!("{}", summary(&r, &fleet_out));
    Ok(r.verdict.exit_code())
}

/// The most simulated nodes `fleet simulate --fabric` runs at once, one process each.
pub const MAX_FABRIC_PROCESSES: u32 = 64;

/// The simulated nodes as one job: a process per node (this binary, `run --fabric`), their
/// ranks given as a user would (NODECERT_RANK, ...), rank 0 on loopback; each node's line in
/// order once all have ended.
fn run_fabric(
    names: &[String],
    node: &str,
    suite: Option<&str>,
    faults: &[(String, String)],
    out: &Path,
) -> Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| input(format!("cannot find this nodecert binary: {e}")))?;
    let dir =
        crate::fsio::write::Dir::create_all(out).map_err(|e| super::output::dir_error(out, e))?;
    // The job's key, new for this run, the owner's alone: its nodes prove they belong to it.
    let key_name = std::ffi::OsStr::new(".fabric-key");
    let key = crate::fabric::JobKey::generate().map_err(input)?;
    dir.replace_with(key_name, 0o600, |f| {
        std::io::Write::write_all(f, key.as_bytes())
    })
    .map_err(|source| Error::Write {
        path: out.join(key_name),
        source,
    })?;
    // A free port for rank 0: asked of the system, then handed to the job.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| input(format!("cannot find a free port for the fabric: {e}")))?
        .port();
    let job = format!("sim-{}", std::process::id());
    let mut children: Vec<(&String, std::process::Child)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut c = std::process::Command::new(&exe);
        c.arg("run");
        if let Some(s) = suite {
            c.arg(s);
        }
        c.args(["--simulate", node, "--fabric", "-q", "--node-name", name])
            .args(["--seed", &(i + 1).to_string()])
            .arg("--out")
            .arg(out.join(name))
            .env("NODECERT_RANK", i.to_string())
            .env("NODECERT_WORLD_SIZE", names.len().to_string())
            .env("NODECERT_HOSTS", names.join(","))
            .env("NODECERT_JOB", &job)
            .env("NODECERT_FABRIC_PORT", port.to_string())
            .env("NODECERT_FABRIC_ROOT", "127.0.0.1")
            .env(crate::fabric::key::KEY_ENV, out.join(key_name))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (_, f) in faults.iter().filter(|(n, _)| n == name) {
            c.args(["--inject", f]);
        }
        let child = match c.spawn() {
            Ok(child) => child,
            Err(e) => {
                // The nodes already started would wait for this one: stop them.
                for (_, mut started) in children {
                    let _ = started.kill();
                    let _ = started.wait();
                }
                return Err(input(format!("cannot start node {name}: {e}")));
            }
        };
        children.push((name, child));
    }
    // Each node's output drained at once (one waiting on a full pipe would hold the others).
    let waited: Vec<(&String, std::io::Result<std::process::Output>)> = children
        .into_iter()
        .map(|(name, child)| (name, std::thread::spawn(move || child.wait_with_output())))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|(name, t)| {
            let out = t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("its reader stopped")));
            (name, out)
        })
        .collect();
    // The job is over: its key serves no one now.
    let _ = dir.remove(key_name);
    for (name, o) in waited {
        let o = o.map_err(|e| input(format!("node {name}: {e}")))?;
        let text = String::from_utf8_lossy(&o.stdout);
        crate::outln!(
            "{name}: {}",
            crate::console::visible(text.lines().last().unwrap_or("(no output)"))
        );
        let err = String::from_utf8_lossy(&o.stderr);
        if let Some(line) = err.lines().find(|l| l.starts_with("error:")) {
            crate::errln!("{name}: {}", crate::console::visible(line));
        }
    }
    Ok(())
}

/// Write (and with `submit`, submit) the Slurm batch script.
pub fn cmd_slurm(mut job: fleet::slurm::Job, submit: bool, wait: bool) -> Result<u8> {
    if let Some(spec) = job.suite.clone() {
        // Loaded now, before anything is written: a suite that does not load (or cannot be
        // named in the job's node list, or run with --fabric) is said before the job waits in
        // the queue. A file is given to the nodes by its absolute path (sbatch may run from
        // elsewhere). The job reads the suite again when it starts, for its node list.
        let mut loaded = crate::suite::load::load(&spec).map_err(Error::Input)?;
        fleet::gather::check_suite_name(&loaded.suite.name)
            .map_err(|e| input(format!("{spec}: the suite's name: {e}")))?;
        if job.fabric {
            super::run::enable_fabric(&mut loaded)?;
        }
        if crate::suite::load::embedded(&spec).is_none() {
            let abs = std::path::absolute(&spec).map_err(|e| input(format!("{spec}: {e}")))?;
            job.suite = Some(script_path(&abs, "the suite")?);
        }
    }
    let out = PathBuf::from(&job.out);
    let dir =
        crate::fsio::write::Dir::create_all(&out).map_err(|e| super::output::dir_error(&out, e))?;
    let abs = std::path::absolute(&out).map_err(|e| input(e.to_string()))?;
    job.out = script_path(&abs, "--out")?;
    // Slurm opens the job's log there as the job's user, following links: nobody else may be
    // able to plant one for the next job id, or swap a folder on the way.
    let me = crate::fsio::trust::euid();
    if let Some(why) = crate::fsio::trust::others_can_redirect_in(&abs, me) {
        return Err(input(format!(
            "--out {}: Slurm writes the job's log ({}) there following links, and {}: make it \
             and the folders above it writable only by you or root (chmod go-w), or choose \
             another --out",
            abs.display(),
            fleet::slurm::log_file("<job id>"),
            crate::console::visible(&why)
        )));
    }
    if job.nodecert.is_empty() {
        let exe = std::env::current_exe().map_err(|e| {
            input(format!(
                "cannot find this nodecert binary ({e}): give --nodecert PATH"
            ))
        })?;
        job.nodecert = script_path(&exe, "this nodecert binary")?;
    }
    let script = fleet::slurm::script(&job).map_err(input)?;
    let path = abs.join(fleet::slurm::SCRIPT_FILE);
    dir.replace(fleet::slurm::SCRIPT_FILE.as_ref(), script.as_bytes())
        .map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
    crate::outln!("wrote {}", path.display());
    if !submit {
        crate::outln!("submit it with: sbatch {}", path.display());
        return Ok(exit::PASS);
    }
    let mut cmd = std::process::Command::new("sbatch");
    cmd.arg("--parsable");
    if wait {
        cmd.arg("--wait");
    }
    // `--wait` waits for the job, as the user asked: no limit of ours. Without it sbatch only
    // submits, and a controller that does not answer must not hold us.
    let limit = (!wait).then_some(fleet::slurm::COMMAND_LIMIT);
    // The script as written, from memory: `sbatch PATH` would read it back from the shared
    // folder, where whoever can rename files could have swapped it since.
    let o = crate::process::run_with_input(&mut cmd, limit, script.as_bytes())
        .map_err(|e| input(e.to_string()))?;
    let id = o
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    if id.is_empty() {
        return Err(input(format!(
            "sbatch failed: {}",
            crate::console::visible(&o.why())
        )));
    }
    crate::outln!("submitted job {}", crate::console::visible(&id));
    if wait {
        let report = abs.join("fleet");
        crate::outln!(
            "job {} ended; fleet report in {}",
            crate::console::visible(&id),
            report.display()
        );
        let log = abs.join(fleet::slurm::log_file(&id));
        return Ok(
            match waited(FleetReport::read(&report), &id, &report, &log) {
                Ok(r) => {
                    crate::out!("{}", summary(&r, &report));
                    r.verdict.exit_code()
                }
                Err(e) => {
                    crate::errln!("error: {e}");
                    exit::INCOMPLETE
                }
            },
        );
    }
    Ok(exit::PASS)
}

/// A path as the batch script names it: its exact text, or an error where it is not UTF-8 (its
/// lossy form would name another file).
fn script_path(p: &Path, what: &str) -> Result<String> {
    p.to_str().map(str::to_string).ok_or_else(|| {
        input(format!(
            "{what} {}: a path that is not UTF-8 cannot be written into the script",
            crate::console::visible(&p.display().to_string())
        ))
    })
}

/// The fleet report of job `id` after `--wait`, or why there is none (a report left by an
/// earlier job is not this one's): the message points at the job's own output, `log`, where a
/// job that stopped before its nodes ran (its suite would not load, say) says why.
fn waited(
    read: std::result::Result<FleetReport, String>,
    id: &str,
    report: &Path,
    log: &Path,
) -> std::result::Result<FleetReport, String> {
    let why = match read {
        Ok(r) if r.job.as_deref() == Some(id) => return Ok(r),
        Ok(r) => format!(
            "{} is of job {}",
            report.display(),
            crate::console::visible(r.job.as_deref().unwrap_or("unknown"))
        ),
        Err(e) => crate::console::visible(&e),
    };
    Err(format!(
        "job {} wrote no fleet report ({why}); what the job printed is in {}",
        crate::console::visible(id),
        crate::console::visible(&log.display().to_string())
    ))
}

/// The most a job file written from stdin may hold (a node list of 100,000 host names).
const MAX_JOB_FILE: u64 = 1024 * 1024;

/// `__job-file FILE [--new-key]`: write a file of a fleet job's script (its node list, its key)
/// as nodecert writes every file, where the shell could not (a FIFO planted between its `rm`
/// and its `>` would be opened and read or block the job; `noclobber` refuses only regular
/// files). The content is stdin's, or a new job key (mode 0600), whose owner's uid is printed.
pub fn cmd_job_file(file: &Path, new_key: bool) -> Result<u8> {
    let failed = |source| Error::Write {
        path: file.to_path_buf(),
        source,
    };
    if new_key {
        // Its owner on stdout: the script hands it to the nodes, which accept a key of that
        // user's besides their own and root's (an NFS folder that squashes root).
        let key = crate::fabric::JobKey::generate().map_err(input)?;
        let owner =
            crate::fsio::write::replace_private_owner(file, key.as_bytes()).map_err(failed)?;
        crate::outln!("{owner}");
    } else {
        let bytes = crate::fsio::read::read_limited(std::io::stdin(), MAX_JOB_FILE, "stdin")
            .map_err(|e| input(format!("stdin: {e}")))?;
        crate::fsio::write::replace(file, &bytes).map_err(failed)?;
    }
    Ok(exit::PASS)
}

/// Write the Kubernetes manifests to `out` (or stdout).
pub fn cmd_k8s(job: fleet::k8s::Job, out: Option<&Path>) -> Result<u8> {
    let m = fleet::k8s::manifests(&job).map_err(input)?;
    let text = serde_json::to_string_pretty(&m).map_err(|e| input(e.to_string()))? + "\n";
    // The same JSON with what would act on a terminal escaped (it may be printed to one).
    let text = crate::console::json_visible(&text);
    match out {
        None => crate::out!("{text}"),
        Some(p) => {
            // Only a file this command wrote before is replaced: a suite, or anything else of
            // the user's, at that path is left as it is.
            if p.symlink_metadata().is_ok() && !previous_manifests(p) {
                return Err(input(format!(
                    "{}: the file exists and holds no manifests of `nodecert fleet k8s`; not \
                     replaced (remove it, or write elsewhere)",
                    p.display()
                )));
            }
            // With the fabric the manifests hold the job's key: the owner's alone.
            let write = if job.fabric {
                crate::fsio::write::replace_private
            } else {
                crate::fsio::write::replace
            };
            write(p, text.as_bytes()).map_err(|source| Error::Write {
                path: p.to_path_buf(),
                source,
            })?;
            crate::outln!(
                "wrote {}; apply it with: kubectl apply -f {}",
                p.display(),
                p.display()
            );
        }
    }
    Ok(exit::PASS)
}

/// Whether `p` holds manifests `fleet k8s` wrote: a JSON List whose items carry nodecert's
/// name label, read (as a regular file, not through a link) within the job file's bound.
fn previous_manifests(p: &Path) -> bool {
    let Ok(bytes) = crate::fsio::read::open(p, false)
        .and_then(|f| crate::fsio::read::read_limited(f, MAX_JOB_FILE, "manifests"))
    else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return false;
    };
    v["kind"] == "List"
        && v["items"].as_array().is_some_and(|items| {
            !items.is_empty()
                && items
                    .iter()
                    .all(|i| i["metadata"]["labels"]["app.kubernetes.io/name"] == "nodecert")
        })
}

/// Which scheduler `fleet drain` talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    Slurm,
    Kubernetes,
}

/// Drain (or taint) the fleet's bad nodes; print the commands, and unless `dry_run` run them.
/// A simulated fleet's commands run only with `allow_simulated` (a test cluster): its verdicts
/// certify no hardware, so they must not take a real node away or give it back.
pub fn cmd_drain(
    fleet_path: &Path,
    scheduler: Scheduler,
    dry_run: bool,
    allow_simulated: bool,
    trust: &Trust,
    job: Option<&str>,
) -> Result<u8> {
    let r = match trust {
        Trust::Untrusted => {
            if !dry_run {
                crate::errln!(
                    "warning: {} is not verified against a trusted signer: whoever can write it \
                     chooses which nodes are drained (--allowed-signers FILE or --pubkey KEY.pub \
                     verifies its signature first)",
                    crate::console::visible(&fleet_path.display().to_string())
                );
            }
            FleetReport::read(fleet_path).map_err(input)?
        }
        trust => match verified_fleet(fleet_path, trust)? {
            Ok(r) => r,
            Err(why) => {
                crate::errln!(
                    "error: not draining: the fleet report does not verify: {}",
                    crate::console::visible(&why)
                );
                return Ok(exit::VERIFY_FAILED);
            }
        },
    };
    // A report of another job (an older one copied into the folder) is not this drain's.
    if let Some(want) = job {
        if r.job.as_deref() != Some(want) {
            crate::errln!(
                "error: not draining: the fleet report is of job {}, not {}",
                crate::console::visible(r.job.as_deref().unwrap_or("(none named)")),
                crate::console::visible(want)
            );
            return Ok(exit::INVALID_INPUT);
        }
    }
    if r.simulated {
        if !dry_run && !allow_simulated {
            return Err(input(
                "refusing to drain or resume nodes on simulated results: they certify no \
                 hardware (--dry-run shows the commands; --allow-simulated runs them, for a test \
                 cluster whose nodes are simulated)",
            ));
        }
        crate::outln!(
            "SIMULATED RESULTS: the fleet's nodes are simulated; {} what they name",
            if dry_run {
                "the commands that would drain"
            } else {
                "draining"
            }
        );
    }
    // A simulated plan's lines say so in a shell comment: copied, they still run as shown.
    let tag = if r.simulated { "  # SIMULATED" } else { "" };
    let (program, plan) = match scheduler {
        Scheduler::Slurm => {
            // The nodes' present reasons decide what is resumed and what is an operator's; a
            // dry run away from the cluster shows the drains alone.
            let current = match fleet::slurm::current_reasons(None) {
                Ok(c) => c,
                Err(_) if dry_run => {
                    crate::outln!(
                        "(sinfo did not answer: current reasons unknown, resumes not shown)"
                    );
                    Vec::new()
                }
                Err(e) => return Err(input(e)),
            };
            ("scontrol", fleet::slurm::drain_plan(&r, &current))
        }
        Scheduler::Kubernetes => ("kubectl", fleet::k8s::drain_plan(&r)),
    };
    let mut failed = 0;
    for args in &plan {
        // Quoted for a shell, then shown as it may reach a terminal: a reason carries text from
        // a node's evidence.
        let shown: Vec<String> = args
            .iter()
            .map(|a| crate::console::visible(&fleet::slurm::sh(a)))
            .collect();
        crate::outln!("{program} {}{tag}", shown.join(" "));
        if dry_run {
            continue;
        }
        let st = crate::process::status(
            std::process::Command::new(program).args(args),
            fleet::slurm::COMMAND_LIMIT,
        );
        if !st.is_ok_and(|s| s.success()) {
            failed += 1;
            crate::errln!("error: {program} {} failed", shown.join(" "));
        }
    }
    if plan.is_empty() {
        crate::outln!(
            "nothing to drain{}",
            crate::console::simulated_tag(r.simulated)
        );
    }
    let fabric: Vec<&str> = r
        .nodes
        .iter()
        .filter(|n| n.fabric_wide_only)
        .map(|n| n.name.as_str())
        .collect();
    if !fabric.is_empty() {
        crate::outln!(
            "not drained: {} failed only for the fabric as a whole (no node at fault): fix the \
             fabric (a switch, routing, or a setting every node shares) and run again{}",
            crate::console::visible(&fabric.join(", ")),
            crate::console::simulated_tag(r.simulated)
        );
    }
    Ok(if failed > 0 {
        exit::NODE_UNTESTABLE
    } else {
        exit::PASS
    })
}

/// The fleet report at `fleet_path` (fleet.json or its folder) once its folder verifies against
/// `trust`: the bytes its signatures seal, read as `verify` reads them; `Err` says why not.
fn verified_fleet(
    fleet_path: &Path,
    trust: &Trust,
) -> Result<std::result::Result<FleetReport, String>> {
    let dir = if fleet_path.is_dir() {
        fleet_path
    } else {
        // The signature seals the folder's fleet.json: a file of another name is not what it
        // seals, and would not be what the drain reads.
        if fleet_path.file_name() != Some(std::ffi::OsStr::new(fleet::FLEET_FILE)) {
            return Ok(Err(format!(
                "{} is not the {} a signature seals: name the report's folder",
                fleet_path.display(),
                fleet::FLEET_FILE
            )));
        }
        fleet_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    let v = crate::sign::verify_dir(dir, trust).map_err(super::signer::sign_error)?;
    if !v.ok() {
        let why = if v.problems.is_empty() {
            "a file or signature did not verify (`nodecert verify` names it)".to_string()
        } else {
            v.problems.join("; ")
        };
        return Ok(Err(why));
    }
    let Some(m) = v
        .manifest
        .as_ref()
        .filter(|m| m.kind == crate::sign::ReportKind::Fleet)
    else {
        return Ok(Err(format!(
            "{} holds a node's report, not a fleet's",
            dir.display()
        )));
    };
    Ok(super::verify::fleet_sealed(dir, &m.evidence_sha256).map_err(|u| u.why))
}

/// Write the fleet's baseline suite.
pub fn cmd_baseline(
    fleet_path: &Path,
    extends: Option<String>,
    name: Option<String>,
    margin_pct: f64,
    out: &Path,
    force: bool,
) -> Result<u8> {
    let r = FleetReport::read(fleet_path).map_err(input)?;
    let extends = match extends {
        Some(e) => e,
        None => {
            let names: std::collections::BTreeSet<&str> =
                r.nodes.iter().filter_map(|n| n.suite.as_deref()).collect();
            match names.into_iter().collect::<Vec<_>>().as_slice() {
                [one] if crate::suite::load::embedded(one).is_some() => one.to_string(),
                _ => {
                    return Err(input(
                        "the nodes did not run one embedded suite: name the suite to extend with --extends",
                    ))
                }
            }
        }
    };
    let name = name.unwrap_or_else(|| format!("{extends}-fleet"));
    let text = fleet::baseline::suite(&r, &extends, &name, margin_pct).map_err(input)?;
    // What is written must load: the same checks as any suite.
    crate::suite::load::load_source(crate::config::Source {
        name: out.display().to_string(),
        text: text.clone(),
    })?;
    let written = if force {
        crate::fsio::write::replace(out, text.as_bytes())
    } else {
        crate::fsio::write::create_new(out, text.as_bytes(), 0o644)
    };
    written.map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => input(format!(
            "{} exists: add --force to replace it",
            out.display()
        )),
        _ => Error::Write {
            path: out.to_path_buf(),
            source: e,
        },
    })?;
    crate::outln!("wrote {} (extends {extends})", out.display());
    if r.simulated {
        crate::outln!("SIMULATED RESULTS: taken from simulated nodes, not from hardware");
    }
    Ok(exit::PASS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two simulated node folders under `shared`.
    fn two_nodes(shared: &Path) {
        for (i, name) in ["a1", "a2"].iter().enumerate() {
            let ev = crate::testutil::simulated_named("h200-vm-1", name, i as u64 + 1, &[]);
            let dir = shared.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join(crate::evidence::EVIDENCE_FILE),
                serde_json::to_string(&ev).unwrap(),
            )
            .unwrap();
        }
    }

    fn held(dir: &Path) -> crate::fsio::write::LockedDir {
        crate::fsio::write::Dir::create_all(dir)
            .unwrap()
            .lock()
            .unwrap()
    }

    /// The output folder is locked before anything is read: a second `fleet report` into a
    /// folder another is writing is turned away before it reads its inputs (here inputs that
    /// cannot be read at all would have been named first).
    #[test]
    fn fleet_report_takes_its_folders_lock_before_it_reads_anything() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("fleet");
        let lock = held(&out);
        let missing = t.path().join("no-such-folder");
        let e = report(
            std::slice::from_ref(&missing),
            &out,
            Expected::default(),
            10.0,
            &Trust::Untrusted,
            None,
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            e.contains("another nodecert is writing to this folder"),
            "{e}"
        );
        drop(lock);
        let e = report(
            &[missing],
            &out,
            Expected::default(),
            10.0,
            &Trust::Untrusted,
            None,
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(e.contains("no-such-folder"), "{e}");
        // The folder existed before: it stays.
        assert!(out.is_dir());
    }

    /// A report that fails before writing leaves no folder it made itself.
    #[test]
    fn a_fleet_report_that_fails_leaves_no_folder_of_its_own() {
        let t = tempfile::tempdir().unwrap();
        let empty = t.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let out = t.path().join("fleet");
        let e = report(
            std::slice::from_ref(&empty),
            &out,
            Expected::default(),
            10.0,
            &Trust::Untrusted,
            None,
        )
        .err()
        .expect("no nodes")
        .to_string();
        assert!(e.contains("no node folders found"), "{e}");
        assert!(
            !out.exists(),
            "the folder made for the report is left behind"
        );
    }

    /// The report's own folder inside the shared folder is not read as a node, whatever path
    /// names the shared folder (it exists, locked, while the nodes are found).
    #[test]
    fn the_report_folder_in_the_shared_folder_is_not_a_node() {
        let t = tempfile::tempdir().unwrap();
        let shared = t.path().join("shared");
        two_nodes(&shared);
        let via = t.path().join("shared").join("a1").join("..");
        let w = report(
            &[via],
            &shared.join("fleet"),
            Expected::default(),
            10.0,
            &Trust::Untrusted,
            None,
        )
        .unwrap();
        let names: Vec<&str> = w.report.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a1", "a2"]);
        assert_eq!(w.report.verdict, crate::fleet::NodeVerdict::Pass);
    }

    #[test]
    fn the_hint_to_check_signers_counts_the_signed_reports_read_without_one() {
        use crate::fleet::{gather::blank, NodeVerdict, SignatureState};
        let mut r = crate::fleet::judge::judge(Vec::new(), &[], 10.0);
        let node = |name: &str, sig: SignatureState| {
            let mut n = blank(name);
            n.verdict = NodeVerdict::Pass;
            n.signature = sig;
            n
        };
        r.nodes = vec![node("n1", SignatureState::Unsigned)];
        assert_eq!(unchecked_hint(&r), None);
        r.nodes.push(node("n2", SignatureState::Intact));
        assert_eq!(
            unchecked_hint(&r).as_deref(),
            Some(
                "hint: 1 node report is signed, but no signer was checked: give \
                 --allowed-signers FILE or --pubkey KEY.pub to verify them"
            )
        );
        r.nodes.push(node("n3", SignatureState::Intact));
        assert!(unchecked_hint(&r)
            .unwrap()
            .starts_with("hint: 2 node reports are signed,"));
    }

    #[test]
    fn only_a_fleet_part_of_which_was_never_judged_is_signed_as_what_it_is() {
        let mut r = crate::fleet::judge::judge(Vec::new(), &["n1".to_string()], 10.0);
        assert_eq!(signed_as(&r).as_deref(), Some("signed as not tested"));
        r.verdict = crate::fleet::NodeVerdict::NothingJudged;
        assert_eq!(signed_as(&r).as_deref(), Some("signed as nothing judged"));
        for v in [
            crate::fleet::NodeVerdict::Pass,
            crate::fleet::NodeVerdict::Fail,
            crate::fleet::NodeVerdict::Refused,
        ] {
            r.verdict = v;
            assert_eq!(signed_as(&r), None, "{v:?}");
        }
    }

    /// `sign` on a fleet folder takes its lock before it reads fleet.json.
    #[test]
    fn signing_a_fleet_takes_its_folders_lock_before_it_reads_fleet_json() {
        let t = tempfile::tempdir().unwrap();
        let key = t.path().join("key");
        crate::sign::keygen(&key, "ops@example.com").unwrap();
        let signer = Signer::open(&key, None).unwrap();
        let dir = t.path().join("fleet");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(crate::fleet::FLEET_FILE), "not json").unwrap();
        let lock = held(&dir);
        let e = cmd_sign(&dir, &signer, false).unwrap_err().to_string();
        assert!(
            e.contains("another nodecert is writing to this folder"),
            "{e}"
        );
        drop(lock);
        let e = cmd_sign(&dir, &signer, false).unwrap_err().to_string();
        assert!(e.contains("not JSON"), "{e}");
    }

    #[test]
    fn after_wait_only_the_report_of_the_job_waited_for_gives_the_exit_code() {
        let mut r = crate::fleet::judge::judge(Vec::new(), &["n1".to_string()], 10.0);
        assert_eq!(r.verdict.exit_code(), exit::INCOMPLETE);
        r.verdict = crate::fleet::NodeVerdict::Fail;
        let p = Path::new("out/fleet");
        let log = Path::new("out/slurm-42.out");
        r.job = Some("41".into());
        let e = waited(Ok(r.clone()), "42", p, log).unwrap_err();
        assert!(e.contains("is of job 41"), "an earlier job's: {e}");
        assert!(
            e.ends_with("what the job printed is in out/slurm-42.out"),
            "{e}"
        );
        r.job = None;
        let e = waited(Ok(r.clone()), "42", p, log).unwrap_err();
        assert!(e.contains("is of job unknown"), "a job not named: {e}");
        r.job = Some("42".into());
        let got = waited(Ok(r.clone()), "42", p, log).unwrap();
        assert_eq!(got.verdict.exit_code(), exit::CHECK_FAILED);
        r.verdict = crate::fleet::NodeVerdict::Pass;
        assert_eq!(
            waited(Ok(r), "42", p, log).unwrap().verdict.exit_code(),
            exit::PASS
        );
        let e = waited(Err("no such file".into()), "42", p, log).unwrap_err();
        assert_eq!(
            e,
            "job 42 wrote no fleet report (no such file); what the job printed is in \
             out/slurm-42.out"
        );
    }
}
