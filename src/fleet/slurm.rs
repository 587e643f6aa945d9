//! Slurm: the batch script that certifies a fleet (one task per node, exclusive, each running
//! `nodecert run` into its own folder of a shared directory), and draining the nodes that failed
//! with `scontrol`, resuming only those nodecert drained.

use super::{FleetReport, NodeVerdict};
use std::fmt::Write;

/// Every drain reason nodecert writes starts with this; it resumes only nodes whose reason does
/// (as LBNL NHC does with "NHC:"), so it never undoes an operator's drain.
pub const REASON_PREFIX: &str = "nodecert:";

/// What the batch script runs.
#[derive(Debug, Clone, Default)]
pub struct Job {
    /// The suite, as `nodecert run` takes it (a file on the shared filesystem, or an embedded
    /// name).
    pub suite: Option<String>,
    /// The shared folder: each node writes `DIR/<node>/`, the job its node list and report.
    pub out: String,
    /// The nodecert binary, by a path every node can run.
    pub nodecert: String,
    /// How many nodes (`--nodes`), or which (`--nodelist`), or both.
    pub nodes: Option<u32>,
    pub nodelist: Option<String>,
    pub partition: Option<String>,
    /// Slurm's time limit (`--time`), e.g. "30:00".
    pub time: Option<String>,
    /// Rehearse on simulated nodes: the node description, and faults per node name.
    pub simulate: Option<String>,
    pub inject: Vec<(String, String)>,
    /// Extra `#SBATCH` lines' arguments (e.g. "--account=ops").
    pub sbatch_args: Vec<String>,
    /// Measure the fabric across the job's nodes too (`run --fabric`).
    pub fabric: bool,
}

/// A word for a POSIX shell: single-quoted unless it is plainly safe.
pub fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The shared folder in `#SBATCH --output=`, where Slurm reads `%` as the start of a pattern
/// (`%%` is a `%`) and a backslash turns every pattern off (the job id among them).
fn output_value(out: &str) -> Result<String, String> {
    if out.contains('\\') {
        return Err(format!(
            "--out {:?}: a backslash would turn off Slurm's file name patterns",
            crate::console::visible(out)
        ));
    }
    Ok(sbatch_value("--out", out)?.replace('%', "%%"))
}

/// An `#SBATCH` line's value cannot be quoted (sbatch reads it up to the line's end): refuse
/// what would end the line or be read as another option.
fn sbatch_value(what: &str, v: &str) -> Result<String, String> {
    if v.is_empty() || v.chars().any(|c| c.is_control() || c == ' ' || c == '#') {
        return Err(format!(
            "{what} {:?}: no spaces, '#' or control characters in an #SBATCH line",
            crate::console::visible(v)
        ));
    }
    Ok(v.to_string())
}

/// The file name of the batch script in the shared folder.
pub const SCRIPT_FILE: &str = "nodecert-fleet.sbatch";

/// The internal command the script writes its files with (`nodecert __job-file FILE
/// [--new-key]`), as nodecert writes every file.
pub const JOB_FILE: &str = "__job-file";

/// The delimiter of the task's here-document in the script.
const TASK_END: &str = "NODECERT_TASK_END";

/// The job's own output (what its script and tasks print) in the shared folder, for job `id`
/// (`%j`, in the script, for Slurm to fill in).
pub fn log_file(id: &str) -> String {
    format!("slurm-{id}.out")
}

/// The batch script, to be written as `job.out/SCRIPT_FILE` (each node runs its task, held in
/// the script as Slurm stored it, not the shared file).
pub fn script(job: &Job) -> Result<String, String> {
    let mut s = String::from(
        "#!/bin/bash\n# Written by `nodecert fleet slurm`: one nodecert run per node, each into its own\n\
         # folder of this shared directory, then the fleet report. Submit with sbatch.\n",
    );
    let _ = writeln!(s, "#SBATCH --job-name=nodecert");
    if job.nodes.is_none() && job.nodelist.is_none() {
        return Err("give --nodes N or --nodelist LIST".into());
    }
    if let Some(n) = job.nodes {
        let _ = writeln!(s, "#SBATCH --nodes={n}");
    }
    if let Some(l) = &job.nodelist {
        super::hostlist::expand(l)?;
        let _ = writeln!(s, "#SBATCH --nodelist={}", sbatch_value("--nodelist", l)?);
    }
    let _ = writeln!(s, "#SBATCH --ntasks-per-node=1\n#SBATCH --exclusive");
    let _ = writeln!(
        s,
        "#SBATCH --output={}/{}",
        output_value(&job.out)?,
        log_file("%j")
    );
    if let Some(p) = &job.partition {
        let _ = writeln!(s, "#SBATCH --partition={}", sbatch_value("--partition", p)?);
    }
    if let Some(t) = &job.time {
        let _ = writeln!(s, "#SBATCH --time={}", sbatch_value("--time", t)?);
    }
    for a in &job.sbatch_args {
        let v = sbatch_value("--sbatch-arg", a)?;
        if !v.starts_with("--") {
            return Err(format!("--sbatch-arg {v:?}: give it as --option=value"));
        }
        let _ = writeln!(s, "#SBATCH {v}");
    }
    let _ = writeln!(s, "set -u");
    let _ = writeln!(s, "nodecert={}", sh(&job.nodecert));
    let _ = writeln!(s, "out={}", sh(&job.out));
    // The task each node runs, from this script as Slurm stored it at submission (srun runs it
    // as `bash -c`), never from the shared folder, where whoever can rename its files could
    // replace the script before the tasks start.
    let mut t = String::from("set -u\n");
    t.push_str("  # The node's name from Slurm: several slurmd may share one host name.\n");
    t.push_str("  inject=()\n  case \"$SLURMD_NODENAME\" in\n");
    let mut by_node: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (node, fault) in &job.inject {
        crate::commands::check_node_name(node).map_err(|e| e.to_string())?;
        by_node.entry(node).or_default().push(fault);
    }
    for (node, faults) in by_node {
        let words: Vec<String> = faults
            .iter()
            .map(|f| format!("--inject {}", sh(f)))
            .collect();
        let _ = writeln!(t, "    {}) inject=({}) ;;", sh(node), words.join(" "));
    }
    t.push_str("  esac\n");
    let mut run = String::from("  exec \"$nodecert\" run");
    if let Some(suite) = &job.suite {
        let _ = write!(run, " {}", sh(suite));
    }
    run.push_str(" --out \"$out/$SLURMD_NODENAME\" -q");
    if job.fabric {
        run.push_str(" --fabric");
    }
    if let Some(node) = &job.simulate {
        let _ = write!(
            run,
            " --simulate {} --seed $((SLURM_PROCID + 1)) --node-name \"$SLURMD_NODENAME\"",
            sh(node)
        );
    }
    // (bash before 4.4 calls an empty array unset under `set -u`: expanded only when set.)
    run.push_str(" ${inject[@]+\"${inject[@]}\"}\n");
    t.push_str(&run);
    // A here-document read as it is (its delimiter quoted): no line of the task may be the
    // delimiter, which would end it early (a suite path holding a line break and that word).
    if t.lines().any(|l| l == TASK_END) {
        return Err(format!(
            "a value holds a line {TASK_END:?}, which ends the task's text"
        ));
    }
    s.push_str(
        "# The task each node runs (srun bash -c): held here, as Slurm stored this script when it\n\
         # was submitted, never read again from the shared folder.\n\
         export nodecert out\n",
    );
    let _ = write!(
        s,
        "IFS= read -r -d '' task <<'{TASK_END}' || true\n{t}{TASK_END}\n\
         [ -n \"$task\" ] || {{ echo 'nodecert: the task could not be read' >&2; exit 1; }}\n"
    );
    // The suite every node is to run, where the job names one: its name and the digest of its
    // contents as the nodes will run it, read when the job starts (a suite edited while the job
    // waited in the queue is the one run), by the same nodecert. `fleet report` holds each
    // node's evidence to them.
    let suite_line = match &job.suite {
        Some(suite) => format!(
            "\"$nodecert\" check {} --job-lines{} || exit 1; ",
            sh(suite),
            if job.fabric { " --fabric" } else { "" }
        ),
        None => String::new(),
    };
    s.push_str(
        "# The job, the suite and the nodes it was given: `fleet report` expects evidence of this\n\
         # job and suite from each. Written by nodecert as it writes every file: a regular file\n\
         # replaced whole, never through a link or into a FIFO planted in its place.\n\
         rm -f \"$out/expected-nodes.txt\"\n",
    );
    let _ = writeln!(
        s,
        "lines=$({{ echo \"# job: $SLURM_JOB_ID\"; {suite_line}scontrol show hostnames \"$SLURM_JOB_NODELIST\"; }}) || exit 1"
    );
    let _ = writeln!(
        s,
        "printf '%s\\n' \"$lines\" | \"$nodecert\" {JOB_FILE} \"$out/expected-nodes.txt\" || exit 1"
    );
    s.push_str(
        "# Rank 0's address, for the fabric's rendezvous: Slurm's NodeAddr of the first node (its\n\
         # name may not resolve, as with several slurmd on one machine).\n\
         first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n\
         NODECERT_FABRIC_ROOT=$(scontrol show node \"$first\" 2>/dev/null | grep -o 'NodeAddr=[^ ]*' | head -n 1 | cut -d= -f2)\n\
         export NODECERT_FABRIC_ROOT\n",
    );
    if job.fabric {
        s.push_str(
            "# The job's key, with which its nodes prove to each other that they belong to it: a\n\
             # new one for each job, readable by its owner alone, removed when the nodes are done.\n\
             key=\"$out/.fabric-key.$SLURM_JOB_ID\"\n\
             rm -f \"$key\"\n",
        );
        let _ = writeln!(
            s,
            "NODECERT_FABRIC_KEY_OWNER=$(\"$nodecert\" {JOB_FILE} --new-key \"$key\" </dev/null) || exit 1\n\
             export NODECERT_FABRIC_KEY_FILE=\"$key\" NODECERT_FABRIC_KEY_OWNER"
        );
    }
    s.push_str(
        "# One task per node; a failing node does not stop the others.\n\
         srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c \"$task\"\n",
    );
    if job.fabric {
        s.push_str("rm -f \"$key\"\n");
    }
    s.push_str(
        "# The fleet's report from every node's folder; its exit code is the job's.\n\
         exec \"$nodecert\" fleet report \"$out\" --out \"$out/fleet\"\n",
    );
    Ok(s)
}

/// A reason Slurm stores as given: printable, no quotes, at most 120 characters.
pub fn reason(text: &str) -> String {
    let clean: String = crate::console::visible(text)
        .chars()
        .map(|c| {
            if c == '"' || c == '\'' || c == '\\' {
                ' '
            } else {
                c
            }
        })
        .collect();
    let mut r = format!("{REASON_PREFIX} {clean}");
    if r.chars().count() > 120 {
        r = r.chars().take(117).collect::<String>() + "...";
    }
    r
}

/// What a node is drained for: its first failing check, or why it was refused.
fn drain_reason(n: &super::NodeResult) -> String {
    match (n.verdict, n.failed_checks.first()) {
        (NodeVerdict::Refused, _) => reason(&format!(
            "refused: {}",
            n.why.first().cloned().unwrap_or_default()
        )),
        (_, Some(c)) => reason(&format!("{} {}", c, n.verdict.label())),
        (_, None) => reason(n.verdict.label()),
    }
}

/// The scontrol calls that drain the fleet's bad nodes and resume the ones nodecert drained
/// that now pass. `current` is each node's present Slurm reason (empty: none), as `sinfo -h -N
/// -o '%N|%E'` prints it.
pub fn drain_plan(r: &FleetReport, current: &[(String, String)]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let reason_of = |name: &str| {
        current
            .iter()
            .find(|(node, _)| node == name)
            .map(|(_, why)| why.as_str())
            .unwrap_or_default()
    };
    for n in &r.nodes {
        // Only host names reach scontrol ("gpu[001-512]" would name 512 nodes), and only the
        // job's own nodes: a folder any node of the job could put beside theirs names no node
        // to take out of service or to put back.
        // A node failed only for the fabric as a whole is left as it is (neither drained
        // nor resumed): no node is at fault, and the fabric is what to fix.
        if n.unlisted || n.fabric_wide_only || crate::commands::check_node_name(&n.name).is_err() {
            continue;
        }
        let why = reason_of(&n.name);
        let operators = !why.is_empty() && !why.starts_with(REASON_PREFIX);
        if n.verdict.drains() {
            // A node an operator drained stays theirs: its reason is not replaced (nodecert
            // would otherwise resume it later as one of its own).
            if operators {
                continue;
            }
            out.push(vec![
                "update".into(),
                format!("NodeName={}", n.name),
                "State=DRAIN".into(),
                format!("Reason={}", drain_reason(n)),
            ]);
        } else if n.verdict <= NodeVerdict::Flagged && why.starts_with(REASON_PREFIX) {
            out.push(vec![
                "update".into(),
                format!("NodeName={}", n.name),
                "State=RESUME".into(),
            ]);
        }
    }
    out
}

/// How long a query or update of Slurm's (sinfo, scontrol) may take. A controller that answers
/// does so in well under a second, and one that does not is retried for MessageTimeout (10 s by
/// default). A health check must not hang on it: slurmd gives its HealthCheckProgram 60 s in
/// all, measurements included.
pub const QUERY_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a submission (sbatch without `--wait`) or a drain (scontrol, kubectl, one node at a
/// time) may take: an operator's command, run outside any health check.
pub const COMMAND_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Each node's present drain reason, from Slurm (`sinfo`), of `node` alone or of every node.
/// Err says why sinfo did not answer.
pub fn current_reasons(node: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let mut cmd = std::process::Command::new("sinfo");
    cmd.args(["-h", "-N", "-o", "%N|%E"]);
    if let Some(n) = node {
        cmd.args(["-n", n]);
    }
    let o = crate::process::run(&mut cmd, Some(QUERY_LIMIT)).map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "sinfo failed: {}",
            crate::console::visible(&o.why())
        ));
    }
    if o.truncated {
        return Err(format!(
            "sinfo listed over {} MiB of nodes and reasons: not read",
            crate::process::STDOUT_LIMIT >> 20
        ));
    }
    Ok(parse_reasons(&o.stdout))
}

/// Parse `sinfo -h -N -o '%N|%E'`: node and reason ("none" is no reason).
pub fn parse_reasons(text: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(n, r)| {
            let r = r.trim();
            (
                n.trim().to_string(),
                if r == "none" {
                    String::new()
                } else {
                    r.to_string()
                },
            )
        })
        .collect();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::gather::blank;

    fn fleet(nodes: &[(&str, NodeVerdict)]) -> FleetReport {
        let nodes = nodes
            .iter()
            .map(|(name, v)| {
                let mut n = blank(name);
                n.verdict = *v;
                if *v == NodeVerdict::Fail {
                    n.failed_checks = vec!["topology".into()];
                }
                n
            })
            .collect();
        let mut r = crate::fleet::judge::judge(vec![], &[], 10.0);
        r.nodes = nodes;
        r
    }

    fn plan(r: &FleetReport, current: &[(&str, &str)]) -> Vec<String> {
        let cur: Vec<(String, String)> = current
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        drain_plan(r, &cur)
            .into_iter()
            .map(|a| a.join(" "))
            .collect()
    }

    /// The task each node runs is in the script as Slurm stores it, read as it is; a value with
    /// a line that would end its text early is refused, and bash reads back the task written.
    #[test]
    fn the_task_is_held_in_the_script_and_cannot_be_ended_early() {
        let job = |suite: &str| Job {
            suite: Some(suite.into()),
            out: "/shared/x".into(),
            nodecert: "/opt/nodecert".into(),
            nodes: Some(2),
            ..Default::default()
        };
        let s = script(&job("/s/it's.toml")).unwrap();
        assert!(
            !s.contains(SCRIPT_FILE),
            "no task reads the shared script: {s}"
        );
        // bash reads the here-document back into $task as it was written.
        let head: String = s
            .lines()
            .take_while(|l| !l.starts_with("# The job, the suite"))
            .map(|l| format!("{l}\n"))
            .collect();
        let o = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("{head}printf %s \"$task\""))
            .output()
            .unwrap();
        let task = String::from_utf8(o.stdout).unwrap();
        assert!(task.starts_with("set -u\n"), "{task}");
        assert!(
            task.contains(
                "exec \"$nodecert\" run '/s/it'\\''s.toml' --out \"$out/$SLURMD_NODENAME\" -q"
            ),
            "{task}"
        );
        let e = script(&job("/s/a\nNODECERT_TASK_END\nrm -rf /\n")).unwrap_err();
        assert!(e.contains("ends the task's text"), "{e}");
        // Slurm's file name patterns: a % in the folder is written %%, a backslash refused.
        let mut j = job("x");
        j.out = "/shared/100%/a".into();
        let s = script(&j).unwrap();
        assert!(
            s.lines()
                .any(|l| l == "#SBATCH --output=/shared/100%%/a/slurm-%j.out"),
            "{s}"
        );
        assert!(s.lines().any(|l| l == "out=/shared/100%/a"), "{s}");
        j.out = "/shared/a\\b".into();
        assert!(script(&j).unwrap_err().contains("a backslash"));
    }

    #[test]
    fn nodecert_drains_what_failed_and_resumes_only_its_own_drains() {
        use NodeVerdict::*;
        let r = fleet(&[
            ("n1", Fail),
            ("n2", Fail),
            ("n3", Pass),
            ("n4", Pass),
            ("n5", Flagged),
            ("n6", Refused),
            ("n7", NotTested),
            ("--all", Fail),
            ("gpu[1-512]", Refused),
        ]);
        let got = plan(
            &r,
            &[
                ("n2", "replacing a DIMM"),
                ("n3", "nodecert: topology FAIL"),
                ("n4", "replacing a DIMM"),
                ("n5", "nodecert: p2p_bandwidth FAIL"),
                ("n7", "nodecert: health FAIL"),
            ],
        );
        assert_eq!(
            got,
            [
                "update NodeName=n1 State=DRAIN Reason=nodecert: topology FAIL",
                "update NodeName=n3 State=RESUME",
                "update NodeName=n5 State=RESUME",
                "update NodeName=n6 State=DRAIN Reason=nodecert: refused: ",
            ]
        );
        // Folders of nodes not in the job's node list are neither drained nor resumed.
        let mut r = r;
        for n in r
            .nodes
            .iter_mut()
            .filter(|n| ["n1", "n3"].contains(&n.name.as_str()))
        {
            n.unlisted = true;
        }
        let got = plan(
            &r,
            &[
                ("n2", "replacing a DIMM"),
                ("n3", "nodecert: topology FAIL"),
            ],
        );
        assert_eq!(
            got,
            ["update NodeName=n6 State=DRAIN Reason=nodecert: refused: "]
        );
        // A node failed only for the fabric as a whole is left as it is: not drained, and one
        // nodecert drained before is not resumed either.
        for n in r.nodes.iter_mut() {
            n.unlisted = false;
            n.fabric_wide_only = ["n1", "n2"].contains(&n.name.as_str());
        }
        let got = plan(&r, &[("n2", "nodecert: fabric FAIL")]);
        assert_eq!(
            got,
            ["update NodeName=n6 State=DRAIN Reason=nodecert: refused: "]
        );
        r.nodes[0].fabric_wide_only = false;
        let got = plan(&r, &[("n2", "nodecert: fabric FAIL")]);
        assert_eq!(
            got[0],
            "update NodeName=n1 State=DRAIN Reason=nodecert: topology FAIL"
        );
    }

    #[test]
    fn reasons_are_printable_unquoted_and_bounded() {
        let r = reason("a \"quoted\" 'x' \\ \u{1b}[31m and more");
        assert!(r.starts_with("nodecert: a  quoted   x"), "{r}");
        assert!(!r.contains(['"', '\'', '\\', '\u{1b}']), "{r}");
        assert_eq!(reason(&"x".repeat(500)).chars().count(), 120);
        assert_eq!(
            parse_reasons("n1|none\nn2|nodecert: topology FAIL\nbad line\n"),
            [
                ("n1".to_string(), String::new()),
                ("n2".to_string(), "nodecert: topology FAIL".to_string())
            ]
        );
    }
}
