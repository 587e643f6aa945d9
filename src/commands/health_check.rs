//! `nodecert health-check`: the quick profile of a suite (inventory, topology, virtualization
//! and health; no bandwidth, no collective, no training: seconds), with exit codes and output in
//! the conventions of what runs it: Slurm's HealthCheckProgram and Prolog, and Kubernetes'
//! node-problem-detector custom plugins.

use super::backend;
use crate::error::Result;
use crate::evidence::Verdict;
use crate::suite::load::{self, LoadedSuite};

/// Whose conventions the exit code and output follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// nodecert's own exit codes (those of `run`).
    Nodecert,
    /// node-problem-detector custom plugin: exit 0 OK, 1 a problem, 2 unknown; one line on
    /// stdout.
    Npd,
    /// Slurm Prolog: exit non-zero only when the node is bad (Slurm then drains it and
    /// requeues the job); a check nodecert could not complete does not take the node away.
    SlurmProlog,
    /// Slurm HealthCheckProgram: Slurm ignores its exit code, so nodecert drains a bad node
    /// itself (`scontrol update State=DRAIN Reason="nodecert: ..."`) and resumes a good one that
    /// it drained before, as LBNL NHC does. Exit 0 OK, 1 bad.
    SlurmHealthcheck,
}

/// The quick profile of `loaded`: only the checks that read the node (no measurement). The
/// network check stays: a port down, a rate trained low or GPUDirect RDMA missing is read in
/// milliseconds, and its counters are judged over the seconds the profile takes.
pub fn quick(mut loaded: LoadedSuite) -> LoadedSuite {
    let c = &mut loaded.suite.checks;
    c.host_bandwidth = None;
    c.p2p_bandwidth = None;
    c.p2p_latency = None;
    c.collective.clear();
    c.compute = None;
    c.training = None;
    // Nothing here measures a GPU, so MIG mode (a MIG-hosting cluster's normal state) is not
    // held against the node unless the suite says "off" itself.
    loaded
        .suite
        .node
        .mig
        .get_or_insert(crate::suite::MigExpect::Any);
    // A health check runs beside jobs (Slurm's HealthCheckNodeState=ANY, node-problem-detector)
    // and on nodes shared between jobs: their processes are no fault of the node.
    if let Some(h) = loaded.suite.checks.health.as_mut() {
        h.other_processes
            .get_or_insert(crate::suite::OtherProcesses::Shown);
    }
    loaded.suite.baseline = None;
    loaded.baseline = None;
    loaded
}

/// The exit code of a simulated verdict under `mode`, without --allow-simulated: a scheduler
/// must not act on it. NPD's "unknown" (2) sets no condition on the node, Slurm's 0 drains
/// nothing; nodecert's own codes say the verdict.
pub fn simulated_code(mode: Mode, v: Verdict) -> u8 {
    match mode {
        Mode::Nodecert => v.exit_code(),
        Mode::Npd => 2,
        Mode::SlurmProlog | Mode::SlurmHealthcheck => 0,
    }
}

/// The exit code of `v` under `mode`.
pub fn exit_code(mode: Mode, v: Verdict) -> u8 {
    let bad = matches!(v, Verdict::Fail | Verdict::Error);
    match mode {
        Mode::Nodecert => v.exit_code(),
        Mode::Npd => match v {
            Verdict::Pass => 0,
            _ if bad => 1,
            _ => 2,
        },
        Mode::SlurmProlog | Mode::SlurmHealthcheck => u8::from(bad),
    }
}

/// The reason a health check drains with starts with this; it resumes only such nodes (a drain
/// by `fleet drain`, for a bandwidth this profile does not measure, stays until a fleet run
/// passes).
pub const HEALTH_REASON: &str = "nodecert: health-check";

pub fn cmd_health_check(
    suite: Option<String>,
    simulate: Option<String>,
    inject: Vec<String>,
    node_name: Option<String>,
    mode: Mode,
    allow_simulated: bool,
) -> Result<u8> {
    // Simulated results certify no hardware: they drain or resume a Slurm node only on a test
    // cluster, said so with --allow-simulated.
    let sim_tag = if simulate.is_some() {
        " [SIMULATED]"
    } else {
        ""
    };
    let act = simulate.is_none() || allow_simulated;
    let left_alone = || {
        crate::errln!(
            "nodecert health-check [SIMULATED]: the node's Slurm state is left alone \
             (--allow-simulated acts on a test cluster whose nodes are simulated)"
        )
    };
    match judge(suite, simulate, inject, node_name) {
        Ok((v, why, simulated)) => {
            // NPD shows the first line; Slurm logs it.
            crate::outln!(
                "nodecert health-check{}: {}{}",
                if simulated { " [SIMULATED]" } else { "" },
                v.label(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", crate::console::visible(&why.join("; ")))
                }
            );
            if mode == Mode::SlurmHealthcheck {
                match act {
                    true => slurm_act(v, &why),
                    false => left_alone(),
                }
            }
            Ok(match act {
                true => exit_code(mode, v),
                false => simulated_code(mode, v),
            })
        }
        // nodecert's own convention: the error and its exit code, as every command.
        Err(e) if mode == Mode::Nodecert => Err(e),
        Err(e) => {
            // A node where nodecert cannot reach the GPUs is a bad node; a suite or flag that is
            // wrong is nodecert's problem, not the node's: it never takes a node away.
            let hardware = matches!(e, crate::error::Error::Hardware(_));
            let text = e.console_text();
            crate::outln!("nodecert health-check{sim_tag}: ERROR: {}", text);
            if mode == Mode::SlurmHealthcheck && hardware {
                match act {
                    true => slurm_act(Verdict::Error, &[text]),
                    false => left_alone(),
                }
            }
            Ok(match mode {
                _ if !act => simulated_code(mode, Verdict::Error),
                Mode::Npd if hardware => 1,
                Mode::Npd => 2,
                _ => u8::from(hardware),
            })
        }
    }
}

/// Run the quick profile: its verdict, what failed, and whether the node is simulated.
fn judge(
    suite: Option<String>,
    simulate: Option<String>,
    inject: Vec<String>,
    node_name: Option<String>,
) -> Result<(Verdict, Vec<String>, bool)> {
    let (mut b, simrec) = backend(simulate.as_deref(), &inject, 1, node_name.as_deref())?;
    let inv = b.inventory()?;
    let given = suite.map(|s| load::load(&s)).transpose()?;
    let loaded = super::run::suite_for(given, simrec.as_ref(), &inv)?;
    let loaded = quick(loaded);
    let ev = crate::runner::new_evidence(&loaded, b.as_ref(), inv, simrec, super::environment(&[]));
    let ev = crate::runner::run(&loaded, b.as_mut(), ev, None, &mut crate::runner::Silent)
        .map_err(|source| crate::error::Error::Write {
            path: "evidence".into(),
            source,
        })?;
    // What failed; or, for a partial verdict, what was left unjudged.
    let why: Vec<String> = ev
        .checks
        .iter()
        .filter(|c| c.status >= crate::evidence::Status::Fail)
        .map(|c| format!("{}: {}", c.id, c.summary))
        .chain(
            ev.partial_text()
                .filter(|_| ev.assess() == Verdict::Partial),
        )
        .collect();
    Ok((ev.assess(), why, ev.simulated))
}

/// What HealthCheckProgram does about this node (SLURMD_NODENAME): drain it when bad, unless an
/// operator or another tool drained it already (their reason stays); resume it when good, only
/// if a health check drained it. Failures to reach Slurm are printed, not fatal.
fn slurm_act(v: Verdict, why: &[String]) {
    let Some(node) = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| crate::commands::check_node_name(n).is_ok())
    else {
        crate::errln!(
            "nodecert health-check: SLURMD_NODENAME is not set: not run by slurmd, nothing drained"
        );
        return;
    };
    let current = crate::fleet::slurm::current_reasons(Some(&node))
        .unwrap_or_default()
        .into_iter()
        .find(|(n, _)| n == &node)
        .map(|(_, r)| r)
        .unwrap_or_default();
    let args: Vec<String> = match action(v, &current) {
        Act::Drain => {
            let reason = crate::fleet::slurm::reason(&format!(
                "health-check {}: {}",
                v.label(),
                why.first().cloned().unwrap_or_default()
            ));
            vec![
                "update".into(),
                format!("NodeName={node}"),
                "State=DRAIN".into(),
                format!("Reason={reason}"),
            ]
        }
        Act::Resume => vec![
            "update".into(),
            format!("NodeName={node}"),
            "State=RESUME".into(),
        ],
        Act::Nothing => return,
    };
    match crate::process::status(
        std::process::Command::new("scontrol").args(&args),
        crate::fleet::slurm::QUERY_LIMIT,
    ) {
        Ok(s) if s.success() => {
            crate::errln!("nodecert health-check: scontrol {}", args.join(" "))
        }
        _ => crate::errln!("nodecert health-check: scontrol {} failed", args.join(" ")),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Act {
    Drain,
    Resume,
    Nothing,
}

/// What to do with a node of verdict `v` whose Slurm reason is `current` ("" when none).
fn action(v: Verdict, current: &str) -> Act {
    let bad = matches!(v, Verdict::Fail | Verdict::Error);
    if bad {
        // Already drained by a health check: the reason stays the first one. Drained by anyone
        // else: theirs.
        if current.is_empty() {
            Act::Drain
        } else {
            Act::Nothing
        }
    } else if v == Verdict::Pass && current.starts_with(HEALTH_REASON) {
        Act::Resume
    } else {
        Act::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_convention_gets_its_exit_codes() {
        use Verdict::*;
        let all = [Pass, Fail, Error, Incomplete, NothingJudged, Partial];
        let codes = |m| all.map(|v| exit_code(m, v));
        assert_eq!(codes(Mode::Nodecert), [0, 1, 3, 5, 6, 7]);
        assert_eq!(codes(Mode::Npd), [0, 1, 1, 2, 2, 2]);
        assert_eq!(codes(Mode::SlurmProlog), [0, 1, 1, 0, 0, 0]);
        assert_eq!(codes(Mode::SlurmHealthcheck), [0, 1, 1, 0, 0, 0]);
        // Simulated, without --allow-simulated: no scheduler acts on it.
        let sim = |m| all.map(|v| simulated_code(m, v));
        assert_eq!(sim(Mode::Nodecert), [0, 1, 3, 5, 6, 7]);
        assert_eq!(sim(Mode::Npd), [2; 6]);
        assert_eq!(sim(Mode::SlurmProlog), [0; 6]);
        assert_eq!(sim(Mode::SlurmHealthcheck), [0; 6]);
    }

    #[test]
    fn a_health_check_drains_a_bad_node_once_and_resumes_only_its_own_drains() {
        assert_eq!(action(Verdict::Fail, ""), Act::Drain);
        assert_eq!(action(Verdict::Error, ""), Act::Drain);
        assert_eq!(
            action(Verdict::Fail, "nodecert: health-check FAIL: x"),
            Act::Nothing
        );
        assert_eq!(action(Verdict::Fail, "replacing a DIMM"), Act::Nothing);
        assert_eq!(
            action(Verdict::Pass, "nodecert: health-check FAIL: x"),
            Act::Resume
        );
        // fleet drain's reasons are for figures this profile does not measure; an operator's
        // are theirs.
        assert_eq!(
            action(Verdict::Pass, "nodecert: p2p_bandwidth FAIL"),
            Act::Nothing
        );
        assert_eq!(action(Verdict::Pass, "replacing a DIMM"), Act::Nothing);
        assert_eq!(action(Verdict::Pass, ""), Act::Nothing);
        assert_eq!(
            action(Verdict::Incomplete, "nodecert: health-check FAIL: x"),
            Act::Nothing
        );
    }

    #[test]
    fn the_quick_profile_keeps_only_what_reads_the_node() {
        let q = quick(load::load("h100-sxm-8").unwrap());
        assert_eq!(
            q.suite.promised_checks(),
            ["topology", "virtualization", "health", "network"]
        );
        // MIG is not judged by the quick profile, unless the suite asks.
        assert_eq!(q.suite.node.mig, Some(crate::suite::MigExpect::Any));
        let mut l = load::load("h100-sxm-8").unwrap();
        l.suite.node.mig = Some(crate::suite::MigExpect::Off);
        assert_eq!(quick(l).suite.node.mig, Some(crate::suite::MigExpect::Off));
        // Other processes (jobs beside it) are shown, not judged, unless the suite asks.
        use crate::suite::OtherProcesses as P;
        let health = |l: &LoadedSuite| l.suite.checks.health.clone().expect("health");
        assert_eq!(health(&q).other_processes, Some(P::Shown));
        let mut l = load::load("h100-sxm-8").unwrap();
        assert_eq!(health(&l).other_processes, None);
        l.suite.checks.health.as_mut().unwrap().other_processes = Some(P::Error);
        assert_eq!(health(&quick(l)).other_processes, Some(P::Error));
    }
}
