//! A fleet certified through a real Slurm: `.ci/run` starts a cluster of 5 nodes on this
//! machine (`ci/slurm.sh up`, its folder in NODECERT_SLURM_DIR, a HealthCheckProgram that runs
//! NODECERT_SLURM_DIR/../slurm-hc/cmd when present) and stops it by pid. Here: a real job of 5
//! simulated nodes, one broken and one slow; `fleet report` names both; `fleet drain` drains the
//! broken node in that Slurm, never touches an operator's drain, and resumes only what nodecert
//! drained; `health-check` as HealthCheckProgram drains a node that fails it and resumes it once
//! it passes. Skipped without the cluster, unless NODECERT_REQUIRE_SLURM=1.

mod util;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use util::{read_json, Env};

struct Cluster {
    conf: PathBuf,
    hc_cmd: PathBuf,
}

fn cluster() -> Option<Cluster> {
    match std::env::var_os("NODECERT_SLURM_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            Some(Cluster {
                conf: d.join("slurm.conf"),
                hc_cmd: d.parent().unwrap().join("slurm-hc/cmd"),
            })
        }
        None => {
            assert!(
                std::env::var_os("NODECERT_REQUIRE_SLURM").is_none(),
                "NODECERT_REQUIRE_SLURM is set but NODECERT_SLURM_DIR is not: start the cluster with ci/slurm.sh"
            );
            eprintln!("skipped: no Slurm cluster (NODECERT_SLURM_DIR; see .ci/run)");
            None
        }
    }
}

impl Cluster {
    fn run(&self, program: &str, args: &[&str]) -> String {
        let o = Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            o.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Each node's (state, reason), as sinfo prints them.
    fn nodes(&self) -> Vec<(String, String, String)> {
        self.run("sinfo", &["-h", "-N", "-o", "%N|%T|%E"])
            .lines()
            .filter_map(|l| {
                let mut p = l.splitn(3, '|');
                Some((
                    p.next()?.to_string(),
                    p.next()?.to_string(),
                    p.next()?.to_string(),
                ))
            })
            .collect()
    }

    fn node(&self, name: &str) -> (String, String) {
        self.nodes()
            .into_iter()
            .find(|n| n.0 == name)
            .map(|n| (n.1, n.2))
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// Wait (30 s at most) until `node`'s state and reason satisfy `ok`.
    fn wait_for(&self, name: &str, what: &str, ok: impl Fn(&str, &str) -> bool) {
        let t0 = Instant::now();
        loop {
            let (state, reason) = self.node(name);
            if ok(&state, &reason) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{name} never became {what}: {state} ({reason})"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

fn nodecert(env: &Env, c: &Cluster) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("SLURM_CONF", &c.conf);
    cmd
}

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("nodecert")
}

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_real_slurm_job_certifies_five_nodes_and_nodecert_drains_only_what_it_must() {
    let Some(c) = cluster() else { return };
    let env = Env::new();
    let shared = env.path("shared");
    let shared_s = shared.display().to_string();
    let bin_s = bin().display().to_string();

    // 0. The fabric across four of them: every pair of nodes in rounds over loopback (the
    // nodes' names do not resolve here: rank 0 is found by its Slurm NodeAddr), n3's NIC
    // trained at half its rate; the fleet report names n3 and only n3.
    let fabric = env.path("fabric");
    let out = nodecert(&env, &c)
        .args(["fleet", "slurm", "--out", &fabric.display().to_string()])
        .args(["--nodelist", "n[1-4]", "--time", "10", "--fabric"])
        .args([
            "--simulate",
            "h100-sxm-8",
            "--inject",
            "n3:nic-downtrained:nic=0",
        ])
        .args(["--nodecert", &bin_s, "--submit", "--wait"])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs = || {
        std::fs::read_dir(&fabric)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>()
    };
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", logs());
    assert!(stdout.contains("drain n3: fabric"), "{stdout}\n{}", logs());
    let fleet = read_json(&fabric.join("fleet/fleet.json"));
    let verdicts: Vec<(&str, &str)> = fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("n1", "pass"),
            ("n2", "pass"),
            ("n3", "fail"),
            ("n4", "pass")
        ],
        "{}",
        logs()
    );
    let n3 = read_json(&fabric.join("n3/evidence.json"));
    assert!(
        n3.to_string()
            .contains("node n3 is below the fabric floor with every node that reaches it"),
        "{n3}"
    );

    // 1. The job: five simulated nodes, n2 broken, n4 slow in all_to_all (within its floor),
    // each held to the suite the job names.
    let out = nodecert(&env, &c)
        .args([
            "fleet",
            "slurm",
            "h100-sxm-8",
            "--out",
            &shared_s,
            "--nodes",
            "5",
            "--time",
            "10",
            "--simulate",
            "h100-sxm-8",
            "--inject",
            "n2:nvlink-down:gpu=2",
            "--inject",
            "n4:slow-collective:op=all_to_all,factor=0.85",
            "--nodecert",
            &bin_s,
            "--submit",
            "--wait",
        ])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_dir(&shared)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>()
    );
    let job = stdout
        .lines()
        .find_map(|l| l.strip_prefix("submitted job "))
        .expect("job id")
        .to_string();
    let fleet = read_json(&shared.join("fleet/fleet.json"));
    let verdicts: Vec<(&str, &str)> = fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("n1", "pass"),
            ("n2", "fail"),
            ("n3", "pass"),
            ("n4", "flagged"),
            ("n5", "pass")
        ]
    );
    assert_eq!(
        fleet["expected"],
        serde_json::json!(["n1", "n2", "n3", "n4", "n5"])
    );
    assert_eq!(fleet["suite"], "h100-sxm-8");
    let list = std::fs::read_to_string(shared.join("expected-nodes.txt")).unwrap();
    assert!(list.lines().any(|l| l == "# suite: h100-sxm-8"), "{list}");
    // The digest the job read when it started is the one each node's evidence gives (else
    // every node would be refused).
    let digest = list
        .lines()
        .find_map(|l| l.strip_prefix("# suite-sha256: "))
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(fleet["suite_sha256"], digest);
    let mut ranks = Vec::new();
    for n in fleet["nodes"].as_array().unwrap() {
        let j = &n["job"];
        assert_eq!(j["scheduler"], "slurm");
        assert_eq!(j["id"], job.as_str());
        assert_eq!(j["node"], n["name"]);
        assert_eq!(j["tasks"], 5);
        ranks.push(j["rank"].as_u64().unwrap());
    }
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3, 4]);
    let md = std::fs::read_to_string(shared.join("fleet/fleet.md")).unwrap();
    assert!(md.contains("| n2 | **drain** |"), "{md}");
    assert!(md.contains("| n4 | **investigate** |"), "{md}");

    // 2. An operator drains n5 for their own reasons; nodecert drains n2 and leaves n5 be.
    c.run(
        "scontrol",
        &[
            "update",
            "NodeName=n5",
            "State=DRAIN",
            "Reason=operator: maintenance",
        ],
    );
    let out = nodecert(&env, &c)
        .args(["fleet", "drain", &format!("{shared_s}/fleet"), "--slurm"])
        // The cluster's nodes are simulated: a test cluster, said so.
        .arg("--allow-simulated")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_for("n2", "drained by nodecert", |s, r| {
        s.starts_with("drain") && r == "nodecert: topology FAIL"
    });
    assert_eq!(c.node("n5").1, "operator: maintenance");
    for n in ["n1", "n3", "n4"] {
        assert!(!c.node(n).0.starts_with("drain"), "{n}: {:?}", c.node(n));
    }

    // 3. After the repair, a fleet where n2 (and everything else) passes: nodecert resumes n2,
    // which it drained, and not n5, which it did not.
    let again = env.path("again");
    for (i, n) in ["n1", "n2", "n3", "n4", "n5"].iter().enumerate() {
        let o = env
            .cmd()
            .args([
                "run",
                "--simulate",
                "h100-sxm-8",
                "--node-name",
                n,
                "--seed",
                &(i + 1).to_string(),
                "-q",
                "--out",
            ])
            .arg(again.join(n))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0));
    }
    let o = env
        .cmd()
        .args(["fleet", "report", "again", "--out", "again/fleet"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = nodecert(&env, &c)
        .args([
            "fleet",
            "drain",
            "again/fleet",
            "--slurm",
            "--allow-simulated",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("scontrol update NodeName=n2 State=RESUME"),
        "{text}"
    );
    assert!(!text.contains("NodeName=n5"), "{text}");
    c.wait_for("n2", "idle", |s, _| s == "idle");
    assert_eq!(c.node("n5").1, "operator: maintenance");
    c.run("scontrol", &["update", "NodeName=n5", "State=RESUME"]);
    c.wait_for("n5", "idle", |s, _| s == "idle");

    // 4. health-check as HealthCheckProgram (every 5 s): n3 loses an ECC check and is drained
    // by nodecert; repaired, it is resumed by nodecert.
    let path = std::env::var("PATH").unwrap_or_default();
    let hc = |n3_fault: &str| {
        format!(
            "#!/bin/sh\nexport PATH='{path}' SLURM_CONF='{}'\nif [ \"$SLURMD_NODENAME\" = n3 ]; then set -- {n3_fault}; fi\nexec '{bin_s}' health-check --simulate h100-sxm-8 --mode slurm-healthcheck --allow-simulated \"$@\"\n",
            c.conf.display()
        )
    };
    write_exec(&c.hc_cmd, &hc("--inject ecc-uncorrectable:gpu=0"));
    let drained = std::panic::catch_unwind(|| {
        c.wait_for("n3", "drained by health-check", |s, r| {
            s.starts_with("drain") && r.starts_with("nodecert: health-check FAIL")
        })
    });
    write_exec(&c.hc_cmd, &hc(""));
    let resumed = std::panic::catch_unwind(|| c.wait_for("n3", "idle", |s, _| s == "idle"));
    let _ = std::fs::remove_file(&c.hc_cmd);
    drained.unwrap();
    resumed.unwrap();
    for n in ["n1", "n2", "n4", "n5"] {
        assert_eq!(c.node(n).0, "idle", "{n}");
    }
}
