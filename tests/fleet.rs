//! Fleets through the binary: a simulated fleet with a broken node and a slow one, what
//! `fleet report` refuses (copied, unreadable, linked, tampered), the node list, determinism,
//! draining, and the Slurm and Kubernetes files it writes.

mod util;
use std::fs;
use util::{read_json, Env};

fn verdicts(fleet: &serde_json::Value) -> Vec<(String, String)> {
    fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

const FILES: [&str; 5] = [
    "fleet.json",
    "fleet.html",
    "fleet.md",
    "fleet-junit.xml",
    "fleet.prom",
];

#[test]
fn a_simulated_fleet_fails_the_broken_node_flags_the_slow_one_and_refuses_what_cannot_be_trusted() {
    let env = Env::new();
    let out = env
        .cmd()
        .args([
            "fleet",
            "simulate",
            "--nodes",
            "6",
            "--inject",
            "n03:nvlink-down:gpu=2",
            "--inject",
            "n05:slow-collective:op=all_to_all,factor=0.85",
            "--out",
            "sim",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("SIMULATED RESULTS"), "{stdout}");
    assert!(stdout.contains("drain n03: topology"), "{stdout}");
    assert!(
        stdout.contains("investigate n05: collective.all_to_all busbw"),
        "{stdout}"
    );
    let fleet = read_json(&env.path("sim/fleet/fleet.json"));
    assert_eq!(
        verdicts(&fleet),
        pairs(&[
            ("n01", "pass"),
            ("n02", "pass"),
            ("n03", "fail"),
            ("n04", "pass"),
            ("n05", "flagged"),
            ("n06", "pass")
        ])
    );
    assert_eq!(fleet["simulated"], true);
    let outliers = fleet["outliers"].as_array().unwrap();
    assert_eq!(outliers.len(), 1, "{outliers:?}");
    assert_eq!(outliers[0]["check"], "collective.all_to_all");
    // Each node's evidence is its own: named, seeded, with its job-free environment.
    let n05 = read_json(&env.path("sim/n05/evidence.json"));
    assert_eq!(n05["node"]["hostname"], "n05");
    assert_eq!(n05["simulation"]["node_name"], "n05");
    assert_eq!(n05["simulation"]["seed"], 5);
    // Every page says simulated.
    let md = env.read("sim/fleet/fleet.md");
    assert!(md.starts_with("> **SIMULATED RESULTS**"), "{md}");
    assert!(md.contains("| n05 | **FLAGGED** |"), "{md}");
    let html = env.read("sim/fleet/fleet.html");
    assert!(html.contains("<title>[SIMULATED] nodecert fleet: 6 nodes — FAIL</title>"));
    assert_eq!(
        html.matches("<svg").count(),
        fleet["distributions"].as_array().unwrap().len()
    );
    let junit = env.read("sim/fleet/fleet-junit.xml");
    assert!(junit.contains("<testsuites name=\"[SIMULATED] nodecert fleet\""));
    assert_eq!(junit.matches("<testsuite ").count(), 6);
    let prom = env.read("sim/fleet/fleet.prom");
    assert!(prom.contains("nodecert_fleet_simulated 1\n"));
    assert!(prom.contains("nodecert_fleet_node_verdict{node=\"n05\",verdict=\"flagged\"} 1\n"));
    assert!(prom.contains("nodecert_fleet_pass 0\n"));

    // The same folders give the same bytes, whatever the output folder.
    let again = env
        .cmd()
        .args(["fleet", "report", "sim", "--out", "again"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    for f in FILES {
        assert_eq!(
            env.read(&format!("sim/fleet/{f}")),
            env.read(&format!("again/{f}")),
            "{f}"
        );
    }

    // The fleet's baseline: a node 12% slow in all_to_all passes the SKU suite but not the
    // suite that holds it to its siblings.
    let out = env
        .cmd()
        .args([
            "fleet",
            "baseline",
            "sim/fleet",
            "--out",
            "fleet-suite.toml",
            "--margin-pct",
            "10",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = env.read("fleet-suite.toml");
    assert!(base.contains("extends = \"h100-sxm-8\""), "{base}");
    assert!(base.contains("of 5 passing nodes"), "{base}");
    let slow = |suite: &str| {
        env.cmd()
            .args([
                "run",
                suite,
                "--simulate",
                "h100-sxm-8",
                "--seed",
                "9",
                "-q",
                "--out",
            ])
            .arg(format!("slow-{}", suite.len()))
            .args(["--inject", "slow-collective:op=all_to_all,factor=0.88"])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(slow("h100-sxm-8"), Some(0));
    assert_eq!(slow("fleet-suite.toml"), Some(1));
    let again = env
        .cmd()
        .args([
            "fleet",
            "baseline",
            "sim/fleet",
            "--out",
            "fleet-suite.toml",
        ])
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(2),
        "an existing suite is not replaced"
    );

    // A copied folder: both nodes that claim its GPUs are refused (exit 2), not passed.
    util::copy_dir(&env.path("sim/n02"), &env.path("sim/n07"));
    // The job's node list names a node that never reported.
    env.write(
        "sim/expected-nodes.txt",
        "# the job's nodes\nn01\nn02\nn03\nn04\nn05\nn06\nn07\nn08\n",
    );
    // An unreadable evidence file, and a node folder that is a link.
    fs::write(env.path("sim/n04/evidence.json"), "{ not json").unwrap();
    std::os::unix::fs::symlink(env.path("sim/n01"), env.path("sim/n09")).unwrap();
    let out = env
        .cmd()
        .args(["fleet", "report", "sim", "--out", "third"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let fleet = read_json(&env.path("third/fleet.json"));
    assert_eq!(
        verdicts(&fleet),
        pairs(&[
            ("n01", "pass"),
            ("n02", "refused"),
            ("n03", "fail"),
            ("n04", "refused"),
            // Refused nodes take no part in the median: four nodes are too few to flag n05.
            ("n05", "pass"),
            ("n06", "pass"),
            ("n07", "refused"),
            ("n08", "not_tested"),
            ("n09", "refused")
        ])
    );
    let why = |n: usize| fleet["nodes"][n]["why"][0].as_str().unwrap().to_string();
    assert!(
        why(1).contains("is also reported by node n07"),
        "{}",
        why(1)
    );
    assert!(why(3).contains("its evidence cannot be read"), "{}", why(3));
    assert!(why(7).contains("no results were reported"), "{}", why(7));
    assert!(why(8).contains("symbolic link"), "{}", why(8));
    assert!(fleet["nodes"][8]["why"][1]
        .as_str()
        .unwrap()
        .contains("not in the job's node list"));
    assert_eq!(fleet["nodes"][8]["unlisted"], true);
    assert!(fleet["nodes"][7].get("unlisted").is_none());

    // --expect overrides the list: a node outside it is named, one missing is not tested.
    let out = env
        .cmd()
        .args([
            "fleet", "report", "sim/n01", "sim/n06", "--expect", "n[01-02]", "--out", "fourth",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let fleet = read_json(&env.path("fourth/fleet.json"));
    assert_eq!(
        verdicts(&fleet),
        pairs(&[("n01", "pass"), ("n02", "not_tested"), ("n06", "pass")])
    );

    // A node list of a job (as the Slurm script writes it): evidence that no task of that job
    // wrote is not this job's result.
    env.write("jobdir/expected-nodes.txt", "# job: 99\nn01\nn02\n");
    util::copy_dir(&env.path("sim/n01"), &env.path("jobdir/n01"));
    let out = env
        .cmd()
        .args(["fleet", "report", "jobdir", "--out", "fifth"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let fleet = read_json(&env.path("fifth/fleet.json"));
    assert_eq!(fleet["job"], "99");
    assert_eq!(
        verdicts(&fleet),
        pairs(&[("n01", "not_tested"), ("n02", "not_tested")])
    );
    assert!(fleet["nodes"][0]["why"][0]
        .as_str()
        .unwrap()
        .contains("not written by a task of job 99"));

    // Draining: what failed or was refused, each with a reason nodecert can recognise later.
    let out = env
        .cmd()
        .args(["fleet", "drain", "third", "--slurm", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("scontrol")).collect();
    // n02, n03, n04 and n07; n09, refused but not in the job's node list, names no node of it.
    assert_eq!(lines.len(), 4, "{text}");
    assert!(!text.contains("NodeName=n09"), "{text}");
    // Simulated: each command says so in a shell comment, and still runs as shown if copied.
    assert!(
        lines.contains(
            &"scontrol update NodeName=n03 State=DRAIN 'Reason=nodecert: topology FAIL'  # SIMULATED"
        ),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "scontrol update NodeName=n02 State=DRAIN 'Reason=nodecert: refused: GPU UUID"
        )),
        "{text}"
    );
    // Not run on simulated results, unless the cluster is said to be a test one.
    for scheduler in ["--slurm", "--k8s"] {
        let out = env
            .cmd()
            .args(["fleet", "drain", "third", scheduler])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{scheduler}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("refusing to drain or resume nodes on simulated results"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = env
        .cmd()
        .args(["fleet", "drain", "third", "--k8s", "--dry-run"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("kubectl taint nodes n03 nodecert.io/failed=topology:NoSchedule --overwrite"),
        "{text}"
    );
    assert!(
        text.contains("kubectl label nodes n01 nodecert.io/verdict=pass --overwrite"),
        "{text}"
    );
    assert!(!text.contains("nodes n08"), "{text}");
}

#[test]
fn signed_nodes_are_verified_and_a_tampered_one_is_refused() {
    let env = Env::new();
    let ok = env
        .cmd()
        .args(["keygen", "--out", "key", "--comment", "vendor@example.com"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    for (name, seed) in [("a1", "1"), ("a2", "2")] {
        let out = env
            .cmd()
            .args([
                "run",
                "--simulate",
                "h200-vm-1",
                "--node-name",
                name,
                "--seed",
                seed,
                "--out",
                &format!("nodes/{name}"),
                "-q",
                "--sign-key",
                "key",
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A node's signed folder verifies as before: what a fleet's signature seals is not said.
    let o = env
        .cmd()
        .args(["verify", "nodes/a1", "--pubkey", "key.pub"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    assert!(
        !stdout.contains("This signature seals") && !stdout.contains("node certificates"),
        "{stdout}"
    );
    let report = |out: &str, trust: &[&str]| {
        let mut c = env.cmd();
        c.args(["fleet", "report", "nodes", "--out", out])
            .args(trust);
        let o = c.output().unwrap();
        (
            o.status.code(),
            read_json(&env.path(&format!("{out}/fleet.json"))),
        )
    };
    // The fleet signed too: what its signature vouches for, on the console and in fleet.json.
    let signed = |out: &str, trust: &[&str]| {
        let o = env
            .cmd()
            .args([
                "fleet",
                "report",
                "nodes",
                "--out",
                out,
                "--sign-key",
                "key",
            ])
            .args(trust)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let hint = "hint: 2 node reports are signed, but no signer was checked: give \
                    --allowed-signers FILE or --pubkey KEY.pub to verify them";
        assert_eq!(
            String::from_utf8_lossy(&o.stderr).contains(hint),
            trust.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let md = fs::read_to_string(env.path(&format!("{out}/fleet.md"))).unwrap();
        let fleet = read_json(&env.path(&format!("{out}/fleet.json")));
        (stdout, md, fleet)
    };
    let (code, fleet) = report("r1", &["--pubkey", "key.pub"]);
    assert_eq!(code, Some(0));
    assert_eq!(fleet["nodes"][0]["signature"]["state"], "verified");
    let all = "This signature seals what the fleet report read. All 2 node certificates were \
               verified against trusted signers.";
    let (stdout, md, fleet) = signed("s1", &["--pubkey", "key.pub"]);
    assert!(stdout.contains(all), "{stdout}");
    assert!(md.contains(all), "{md}");
    assert_eq!(fleet["certificates"]["verified"], 2);
    let (_, fleet) = report("r2", &[]);
    assert_eq!(fleet["nodes"][1]["signature"]["state"], "intact");
    let unchecked = "0 of 2 node certificates were verified against trusted signers; not \
                     verified, so not vouched for by this signature: a1, a2 (intact, signer not \
                     checked).";
    let (stdout, md, fleet) = signed("s2", &[]);
    assert!(stdout.contains(unchecked), "{stdout}");
    assert!(md.contains(unchecked), "{md}");
    assert_eq!(fleet["certificates"]["signer_not_checked"], 2);
    // One changed byte in a signed page.
    let md = env.path("nodes/a2/report.md");
    let mut text = fs::read_to_string(&md).unwrap();
    text.push('\n');
    fs::write(&md, text).unwrap();
    let (code, fleet) = report("r3", &["--pubkey", "key.pub"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        verdicts(&fleet),
        pairs(&[("a1", "pass"), ("a2", "refused")])
    );
    assert_eq!(fleet["nodes"][1]["signature"]["state"], "failed");
    assert!(fleet["nodes"][1]["why"][0]
        .as_str()
        .unwrap()
        .contains("report.md: sha-256 mismatch"));
    let failed = "1 of 2 node certificates was verified against trusted signers; not \
                  verified, so not vouched for by this signature: a2 (signature failed).";
    let (stdout, md, fleet) = signed("s3", &["--pubkey", "key.pub"]);
    assert!(stdout.contains(failed), "{stdout}");
    assert!(md.contains(failed), "{md}");
    assert_eq!(fleet["certificates"]["failed"], 1);
    // Without a trusted key the tampering still shows.
    let (code, _) = report("r4", &[]);
    assert_eq!(code, Some(2));
    // With a trusted key required, a folder whose manifest and signatures were removed is
    // refused, not read as unsigned.
    for f in ["nodecert-manifest.txt", "nodecert-manifest.txt.sig"] {
        fs::remove_file(env.path(&format!("nodes/a2/{f}"))).unwrap();
    }
    let (code, fleet) = report("r5", &["--pubkey", "key.pub"]);
    assert_eq!(code, Some(2));
    assert!(fleet["nodes"][1]["why"][0]
        .as_str()
        .unwrap()
        .contains("not signed, but a trusted signer was required"));
    let (code, _) = report("r6", &[]);
    assert_eq!(code, Some(0), "without --pubkey an unsigned node is read");
    // A node's evidence.json that is a link to another file is not followed.
    fs::remove_file(env.path("nodes/a2/evidence.json")).unwrap();
    std::os::unix::fs::symlink(
        env.path("nodes/a1/evidence.json"),
        env.path("nodes/a2/evidence.json"),
    )
    .unwrap();
    let (code, fleet) = report("r7", &[]);
    assert_eq!(code, Some(2));
    assert!(fleet["nodes"][1]["why"][0]
        .as_str()
        .unwrap()
        .contains("is not a regular file"));
}

#[test]
fn the_fleet_report_is_signed_verified_by_stock_openssh_and_refused_when_changed_or_partly_untested(
) {
    let env = Env::new();
    let ok = env
        .cmd()
        .args(["keygen", "--out", "key", "--comment", "ops@example.com"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    for (name, seed) in [("a1", "1"), ("a2", "2")] {
        let out = env
            .cmd()
            .args(["run", "--simulate", "h200-vm-1", "--node-name", name])
            .args(["--seed", seed, "--out", &format!("nodes/{name}"), "-q"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
    }
    let sign = |out: &str, extra: &[&str]| {
        let o = env
            .cmd()
            .args(["fleet", "report", "nodes", "--out", out])
            .args(["--sign-key", "key"])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let verify = |dir: &str| {
        let o = env
            .cmd()
            .args(["verify", dir, "--pubkey", "key.pub"])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, stdout, stderr) = sign("f1", &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("signed f1 as ops@example.com"), "{stdout}");
    assert!(stdout.contains("SIMULATED RESULTS: the signature seals simulated figures"));
    // The signature seals what the fleet report read, not the nodes' own (unsigned) reports:
    // the console, the pages and fleet.json say so.
    let scope = "This signature seals what the fleet report read. 0 of 2 node certificates were \
                 verified against trusted signers; not verified, so not vouched for by this \
                 signature: a1, a2 (unsigned).";
    assert!(stdout.contains(&format!("\n{scope}\n")), "{stdout}");
    for page in ["f1/fleet.md", "f1/fleet.html"] {
        let text = fs::read_to_string(env.path(page)).unwrap();
        assert!(text.contains(scope), "{page}: {text}");
    }
    let f1 = read_json(&env.path("f1/fleet.json"));
    assert_eq!(
        f1["certificates"],
        serde_json::json!({"nodes": 2, "verified": 0, "signer_not_checked": 0, "unsigned": 2,
            "failed": 0, "no_report": 0})
    );
    let manifest = fs::read_to_string(env.path("f1/nodecert-manifest.txt")).unwrap();
    assert!(manifest.contains("\n# kind: fleet\n"), "{manifest}");
    assert!(manifest.contains("\n# simulated: true\n"), "{manifest}");
    for f in FILES {
        assert!(
            manifest.contains(&format!("  {f}\n")),
            "{f} not listed: {manifest}"
        );
    }
    // The pages name the signer and the digest of fleet.json that the manifest lists.
    let digest = manifest
        .lines()
        .find(|l| l.ends_with("  fleet.json"))
        .unwrap()
        .split("  ")
        .next()
        .unwrap()
        .to_string();
    for page in ["f1/fleet.md", "f1/fleet.html"] {
        let text = fs::read_to_string(env.path(page)).unwrap();
        assert!(text.contains(&digest), "{page} lacks the fleet.json digest");
        assert!(text.contains("ssh-keygen -Y verify"), "{page}");
    }
    let (code, stdout) = verify("f1");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("VERIFIED (SIMULATED RESULTS"), "{stdout}");
    assert!(
        stdout.contains(scope),
        "verify says what it vouches for: {stdout}"
    );
    // Anyone can check it with stock OpenSSH and coreutils.
    let pubkey = fs::read_to_string(env.path("key.pub")).unwrap();
    let mut key = pubkey
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    key.insert_str(0, "ops@example.com ");
    fs::write(env.path("allowed_signers"), format!("{key}\n")).unwrap();
    let o = std::process::Command::new("ssh-keygen")
        .current_dir(env.path("."))
        .args([
            "-Y",
            "verify",
            "-f",
            "allowed_signers",
            "-I",
            "ops@example.com",
        ])
        .args(["-n", "nodecert", "-s", "f1/nodecert-manifest.txt.sig"])
        .stdin(fs::File::open(env.path("f1/nodecert-manifest.txt")).unwrap())
        .output()
        .expect("run ssh-keygen");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = std::process::Command::new("sha256sum")
        .current_dir(env.path("f1"))
        .args(["-c", "--quiet", "nodecert-manifest.txt"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    // A signed fleet folder is not written into again.
    let (code, _, stderr) = sign("f1", &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("holds a signed report"), "{stderr}");

    // One node's verdict changed in fleet.json: the signature no longer holds.
    fs::create_dir(env.path("f2")).unwrap();
    for f in ["nodecert-manifest.txt", "nodecert-manifest.txt.sig"]
        .iter()
        .chain(FILES.iter())
    {
        fs::copy(env.path(&format!("f1/{f}")), env.path(&format!("f2/{f}"))).unwrap();
    }
    let json = fs::read_to_string(env.path("f2/fleet.json")).unwrap();
    fs::write(
        env.path("f2/fleet.json"),
        json.replacen("\"verdict\": \"pass\"", "\"verdict\": \"fail\"", 1),
    )
    .unwrap();
    let (code, stdout) = verify("f2");
    assert_eq!(code, Some(4), "{stdout}");
    assert!(stdout.contains("fleet.json: sha-256 mismatch"), "{stdout}");
    // A manifest edited to be a node's: its evidence file is then missing, and the signature
    // does not cover the edit.
    let m = env.path("f2/nodecert-manifest.txt");
    fs::write(&m, manifest.replace("# kind: fleet\n", "")).unwrap();
    let (code, stdout) = verify("f2");
    assert_eq!(code, Some(4));
    assert!(stdout.contains("evidence.json is not listed"), "{stdout}");
    fs::write(&m, manifest.replace("# kind: fleet\n", "# kind: rack\n")).unwrap();
    let (code, stdout) = verify("f2");
    assert_eq!(code, Some(4));
    assert!(stdout.contains("kind is \"rack\""), "{stdout}");

    // A node that was expected but never reported: not signed unless the signer says so.
    let (code, _, stderr) = sign("f3", &["--expect", "a[1-3]"]);
    assert_eq!(code, Some(5), "{stderr}");
    assert!(
        stderr.contains("not signed: the fleet is not tested"),
        "{stderr}"
    );
    assert!(!env.path("f3/nodecert-manifest.txt").exists());
    let o = env
        .cmd()
        .args(["sign", "f3", "--key", "key"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let unsigned_md = fs::read_to_string(env.path("f3/fleet.md")).unwrap();
    assert!(!unsigned_md.contains("## Signature"), "{unsigned_md}");
    // The JUnit and Prometheus files, edited before the signature, are written again from
    // fleet.json: CI and monitoring read them, and the signature seals them.
    let exports = ["f3/fleet-junit.xml", "f3/fleet.prom"];
    let written: Vec<String> = exports
        .iter()
        .map(|f| fs::read_to_string(env.path(f)).unwrap())
        .collect();
    for f in exports {
        fs::write(env.path(f), "edited: all nodes pass\n").unwrap();
    }
    let o = env
        .cmd()
        .args(["sign", "f3", "--key", "key", "--allow-incomplete"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Signing the folder afterwards renders its pages again, as `fleet report --sign-key`
    // would have written them: signed as not tested, and what the signature vouches for.
    let f3_scope = "0 of 3 node certificates were verified against trusted signers; not \
                    verified, so not vouched for by this signature: a1, a2 (unsigned); a3 (no \
                    report).";
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(f3_scope),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    for (f, was) in exports.iter().zip(&written) {
        assert_eq!(&fs::read_to_string(env.path(f)).unwrap(), was, "{f}");
    }
    // A gate on the fleet's signature: it verifies, but it seals a fleet that was not tested
    // whole (5, as `fleet report` exits), while f1 seals a pass (simulated: 2 without
    // --allow-simulated).
    let gate = |dir: &str, extra: &[&str]| {
        env.cmd()
            .args(["verify", dir, "--pubkey", "key.pub", "--require-pass"])
            .args(extra)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(gate("f3", &["--allow-simulated"]), Some(5));
    assert_eq!(gate("f1", &["--allow-simulated"]), Some(0));
    assert_eq!(gate("f1", &[]), Some(2));
    // --host names a node; a fleet's report is none.
    assert_eq!(gate("f1", &["--allow-simulated", "--host", "a1"]), Some(2));
    // The same in JSON: the fleet's verdict and what its signature covers, the gate's code.
    let o = env
        .cmd()
        .args(["verify", "f3", "--pubkey", "key.pub", "--json"])
        .args(["--require-pass", "--allow-simulated"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verified"], true);
    assert_eq!(v["exit_code"], 5);
    assert_eq!(v["sealed"]["kind"], "fleet");
    assert_eq!(v["sealed"]["host"], serde_json::Value::Null);
    assert_eq!(v["sealed"]["gpu_serials"], serde_json::Value::Null);
    assert_eq!(v["sealed"]["exit_code"], 5);
    assert!(
        v["sealed"]["scope"].as_str().unwrap().ends_with(f3_scope),
        "{v}"
    );
    assert_eq!(v["require"]["judged"]["exit_code"], 5);
    for page in ["f3/fleet.md", "f3/fleet.html"] {
        let text = fs::read_to_string(env.path(page)).unwrap();
        assert!(text.contains("signed as not tested"), "{page}: {text}");
        assert!(text.contains(f3_scope), "{page}: {text}");
    }
    let f3_manifest = fs::read_to_string(env.path("f3/nodecert-manifest.txt")).unwrap();
    let f3_json = f3_manifest
        .lines()
        .find(|l| l.ends_with("  fleet.json"))
        .unwrap()
        .split("  ")
        .next()
        .unwrap()
        .to_string();
    let f3_md = fs::read_to_string(env.path("f3/fleet.md")).unwrap();
    assert!(
        f3_md.contains(&f3_json),
        "the pages name fleet.json's digest"
    );
    assert_eq!(verify("f3").0, Some(0));
    // A countersignature cannot render them again: it says so.
    let ok = env
        .cmd()
        .args([
            "keygen",
            "--out",
            "auditor",
            "--comment",
            "auditor@example.com",
        ])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let o = env
        .cmd()
        .args(["sign", "f3", "--key", "auditor", "--allow-incomplete"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("is already signed, so its pages cannot be rendered again"));
    assert_eq!(fs::read_to_string(env.path("f3/fleet.md")).unwrap(), f3_md);
    assert_eq!(verify("f3").0, Some(0));
    // A passing fleet signed afterwards: its pages gain the signature and what it vouches for.
    let o = env
        .cmd()
        .args(["fleet", "report", "nodes", "--out", "f7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let o = env
        .cmd()
        .args(["sign", "f7", "--key", "key"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains(scope));
    for page in ["f7/fleet.md", "f7/fleet.html"] {
        let text = fs::read_to_string(env.path(page)).unwrap();
        assert!(text.contains(scope), "{page}: {text}");
        assert!(!text.contains("signed as"), "{page}: {text}");
    }
    assert_eq!(verify("f7").0, Some(0));
    let (code, _, stderr) = sign("f4", &["--expect", "a[1-3]", "--allow-incomplete"]);
    assert_eq!(code, Some(5), "the exit code stays the fleet's: {stderr}");
    let md = fs::read_to_string(env.path("f4/fleet.md")).unwrap();
    assert!(md.contains("signed as not tested"), "{md}");
    assert_eq!(verify("f4").0, Some(0));
    // A fleet's signed files beside a node's evidence.json do not seal that evidence: verify
    // fails, and fleet report refuses the folder as a node.
    fs::create_dir_all(env.path("nodes2/a9")).unwrap();
    for f in ["nodecert-manifest.txt", "nodecert-manifest.txt.sig"]
        .iter()
        .chain(FILES.iter())
    {
        fs::copy(
            env.path(&format!("f1/{f}")),
            env.path(&format!("nodes2/a9/{f}")),
        )
        .unwrap();
    }
    fs::copy(
        env.path("nodes/a1/evidence.json"),
        env.path("nodes2/a9/evidence.json"),
    )
    .unwrap();
    let (code, stdout) = verify("nodes2/a9");
    assert_eq!(code, Some(4), "{stdout}");
    assert!(
        stdout.contains("evidence.json: not covered by this fleet manifest"),
        "{stdout}"
    );
    assert!(
        stdout.contains("report: a fleet report (fleet.json)"),
        "{stdout}"
    );
    let o = env
        .cmd()
        .args([
            "fleet", "report", "nodes2", "--out", "f6", "--pubkey", "key.pub",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let f6 = read_json(&env.path("f6/fleet.json"));
    assert_eq!(f6["nodes"][0]["verdict"], "refused");
    assert!(
        f6["nodes"][0]["why"][0]
            .as_str()
            .unwrap()
            .contains("does not verify"),
        "{f6}"
    );
    // A fleet folder is not read as a node.
    let o = env
        .cmd()
        .args(["fleet", "report", "f1", "--out", "f5"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a fleet report's folder"));
}

#[test]
fn the_slurm_script_quotes_what_it_is_given_and_is_valid_bash() {
    let env = Env::new();
    // A suite that does not load is said before anything is written or queued.
    let out = env
        .cmd()
        .args(["fleet", "slurm", "it's; rm -rf x.toml", "--out", "none"])
        .args(["--nodes", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!env.path("none").exists(), "nothing is written");
    // The suite's file, its name as awkward as its path: the script names the file by its
    // absolute path and records the name in the job's node list.
    let suite = env.write(
        "it's; rm -rf x.toml",
        "format_version = 1\nname = \"it's \\\"odd\\\" $(x)\"\nextends = \"h100-sxm-8\"\n",
    );
    let quoted = format!("'{}'", suite.display().to_string().replace('\'', "'\\''"));
    // What the job writes of it when it starts: the name as the evidence will hold it.
    let lines = env
        .cmd()
        .args(["check", &suite.display().to_string(), "--job-lines"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&lines.stdout)
            .starts_with("# suite: it's \"odd\" $(x)\n# suite-sha256: "),
        "{lines:?}"
    );
    let out = env
        .cmd()
        .args([
            "fleet",
            "slurm",
            "it's; rm -rf x.toml",
            "--out",
            "shared",
            "--nodes",
            "4",
            "--partition",
            "gpu",
            "--time",
            "30:00",
            "--simulate",
            "h100-sxm-8",
            "--inject",
            "n2:nvlink-down:gpu=2",
            "--nodecert",
            "/opt/node cert/nodecert",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = env.read("shared/nodecert-fleet.sbatch");
    for line in [
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=30:00",
        "nodecert='/opt/node cert/nodecert'",
        "    n2) inject=(--inject nvlink-down:gpu=2) ;;",
        &format!("  exec \"$nodecert\" run {quoted} --out \"$out/$SLURMD_NODENAME\" -q --simulate h100-sxm-8 --seed $((SLURM_PROCID + 1)) --node-name \"$SLURMD_NODENAME\" ${{inject[@]+\"${{inject[@]}}\"}}"),
        &format!("lines=$({{ echo \"# job: $SLURM_JOB_ID\"; \"$nodecert\" check {quoted} --job-lines || exit 1; scontrol show hostnames \"$SLURM_JOB_NODELIST\"; }}) || exit 1"),
        "printf '%s\\n' \"$lines\" | \"$nodecert\" __job-file \"$out/expected-nodes.txt\" || exit 1",
        "srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c \"$task\"",
        "exec \"$nodecert\" fleet report \"$out\" --out \"$out/fleet\"",
    ] {
        assert!(script.lines().any(|l| l == line), "missing {line:?} in\n{script}");
    }
    let ok = std::process::Command::new("bash")
        .arg("-n")
        .arg(env.path("shared/nodecert-fleet.sbatch"))
        .status()
        .unwrap();
    assert!(ok.success());
    // An #SBATCH value cannot be quoted: what would break the line is refused.
    let out = env
        .cmd()
        .args([
            "fleet",
            "slurm",
            "--out",
            "s2",
            "--nodes",
            "2",
            "--partition",
            "gpu #x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = env
        .cmd()
        .args(["fleet", "slurm", "--out", "s3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_kubernetes_manifests_are_an_indexed_job_with_a_headless_service() {
    let env = Env::new();
    let out = env
        .cmd()
        .args([
            "fleet",
            "k8s",
            "--nodes",
            "16",
            "--image",
            "registry.example/nodecert:1",
            "--claim",
            "results",
            "--out",
            "fleet.json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let m = read_json(&env.path("fleet.json"));
    assert_eq!(m["kind"], "List");
    let svc = &m["items"][0];
    let job = &m["items"][1];
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert_eq!(job["spec"]["completions"], 16);
    assert_eq!(job["spec"]["parallelism"], 16);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["subdomain"], "nodecert");
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            ["topologyKey"],
        "kubernetes.io/hostname"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 8);
    assert_eq!(c["args"][2], "/results/$(NODE_NAME)");
    for bad in [["--name", "Bad_Name"], ["--namespace", "-x"]] {
        let out = env
            .cmd()
            .args([
                "fleet", "k8s", "--nodes", "2", "--image", "i", "--claim", "c",
            ])
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    // The manifests written before are replaced; any other file at that path is not.
    let k8s = |out: &str| {
        env.cmd()
            .args([
                "fleet", "k8s", "--nodes", "4", "--image", "i", "--claim", "c",
            ])
            .args(["--out", out])
            .output()
            .unwrap()
    };
    assert_eq!(k8s("fleet.json").status.code(), Some(0));
    assert_eq!(
        read_json(&env.path("fleet.json"))["items"][1]["spec"]["completions"],
        4
    );
    env.write("mine.toml", "format_version = 1\nname = \"mine\"\n");
    let o = k8s("mine.toml");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not replaced"));
    assert_eq!(
        env.read("mine.toml"),
        "format_version = 1\nname = \"mine\"\n"
    );
}

#[test]
fn health_check_answers_each_scheduler_in_its_convention_and_writes_nothing() {
    let env = Env::new();
    let hc = |mode: &str, faults: &[&str]| {
        // Simulated results reach a scheduler's conventions only on a test cluster, said so.
        let mut c = env.cmd();
        c.args(["health-check", "--simulate", "h100-sxm-8", "--mode", mode]);
        c.arg("--allow-simulated");
        for f in faults {
            c.args(["--inject", f]);
        }
        let o = c.output().unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, text) = hc("npd", &[]);
    assert_eq!(code, 0);
    assert_eq!(text, "nodecert health-check [SIMULATED]: PASS\n");
    let (code, text) = hc("npd", &["nvlink-down:gpu=2"]);
    assert_eq!(code, 1);
    assert!(
        text.starts_with("nodecert health-check [SIMULATED]: FAIL: topology: "),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1);
    assert_eq!(hc("slurm-prolog", &["ecc-uncorrectable:gpu=0"]).0, 1);
    assert_eq!(hc("slurm-prolog", &[]).0, 0);
    // The quick profile reads the NICs too: a port down is a bad node.
    let (code, text) = hc("npd", &["nic-down:nic=1"]);
    assert_eq!(code, 1);
    assert!(
        text.starts_with(
            "nodecert health-check [SIMULATED]: FAIL: network: mlx5_1 port 1 is not up"
        ),
        "{text}"
    );
    // A node whose driver cannot be reached is a bad node in every mode (npd 1, prolog 1),
    // and could not be tested for nodecert (3). (Only where no NVIDIA driver is installed.)
    if !std::path::Path::new("/dev/nvidiactl").exists() {
        let real = |mode: &str| {
            let o = env
                .cmd()
                .args(["health-check", "--mode", mode])
                .output()
                .unwrap();
            (
                o.status.code().unwrap(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
            )
        };
        let (code, text) = real("npd");
        assert_eq!(code, 1, "{text}");
        assert!(text.starts_with("nodecert health-check: ERROR: "), "{text}");
        assert_eq!(real("slurm-prolog").0, 1);
        assert_eq!(real("nodecert").0, 3);
    }
    assert_eq!(hc("nodecert", &["nvlink-down:gpu=2"]).0, 1);
    // Without --allow-simulated a simulated failure is "unknown" to NPD and nothing to Slurm:
    // neither marks nor drains the node it runs on.
    for (mode, code) in [
        ("npd", 2),
        ("slurm-prolog", 0),
        ("slurm-healthcheck", 0),
        ("nodecert", 1),
    ] {
        let o = env
            .cmd()
            .args(["health-check", "--simulate", "h100-sxm-8", "--mode", mode])
            .args(["--inject", "nvlink-down:gpu=2"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{mode}");
        assert!(String::from_utf8_lossy(&o.stdout)
            .starts_with("nodecert health-check [SIMULATED]: FAIL"));
    }
    // Without slurmd around it says so, and drains nothing.
    let (code, _) = hc("slurm-healthcheck", &["nvlink-down:gpu=2"]);
    assert_eq!(code, 1);
    // An unusable suite is "unknown" to NPD (2), not a broken node.
    let o = env
        .cmd()
        .args([
            "health-check",
            "nope.toml",
            "--simulate",
            "h100-sxm-8",
            "--mode",
            "npd",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        std::fs::read_dir(env.dir.path()).unwrap().count(),
        0,
        "no files written"
    );
}

/// A fake `scontrol` and `sinfo` that log their arguments, on a PATH of their own.
fn fake_slurm(env: &Env) -> (std::ffi::OsString, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = env.path("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = env.path("slurm.log");
    for tool in ["scontrol", "sinfo"] {
        let p = bin.join(tool);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho {tool} \"$@\" >> '{}'\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    (path, log)
}

#[test]
fn a_simulated_health_check_leaves_the_slurm_node_alone_unless_told_it_is_a_test_cluster() {
    let env = Env::new();
    let (path, log) = fake_slurm(&env);
    let hc = |extra: &[&str]| {
        env.cmd()
            .args([
                "health-check",
                "--simulate",
                "h100-sxm-8",
                "--inject",
                "nvlink-down:gpu=2",
            ])
            .args(["--mode", "slurm-healthcheck"])
            .args(extra)
            .env("PATH", &path)
            .env("SLURMD_NODENAME", "n7")
            .output()
            .unwrap()
    };
    let o = hc(&[]);
    assert_eq!(o.status.code(), Some(0), "no drain by the exit code either");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("[SIMULATED]: the node's Slurm state is left alone"),
        "{err}"
    );
    assert!(!log.exists(), "scontrol or sinfo ran");
    let o = hc(&["--allow-simulated"]);
    assert_eq!(o.status.code(), Some(1));
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls
            .contains("scontrol update NodeName=n7 State=DRAIN Reason=nodecert: health-check FAIL"),
        "{calls}"
    );
}

/// The suite the job ran, as its node list records it (or `--suite`): a node that ran a suite
/// of another name (a local file renamed, so that it stood alone under its name) is refused.
/// Without the line the fleet cannot know, and each name stands as before. The lines the
/// Slurm job writes (`check --job-lines`) name the digest too: a node that ran other contents
/// under the suite's name is refused, and one that ran the suite itself is not.
#[test]
fn a_node_that_ran_a_renamed_suite_is_refused_when_the_job_names_its_suite() {
    let env = Env::new();
    env.write(
        "easy.toml",
        "format_version = 1\nname = \"easy\"\nextends = \"h200-vm-1\"\n",
    );
    for (name, suite, seed) in [("a1", "h200-vm-1", "1"), ("a2", "easy.toml", "2")] {
        let out = env
            .cmd()
            .args(["run", suite, "--simulate", "h200-vm-1", "--node-name", name])
            .args(["--seed", seed, "--out", &format!("job/{name}"), "-q"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}");
    }
    let report = |out: &str, extra: &[&str]| {
        let o = env
            .cmd()
            .args(["fleet", "report", "job", "--out", out])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // No suite known: each stands under its own name.
    assert_eq!(report("open", &[]).0, Some(0));
    assert_eq!(read_json(&env.path("open/fleet.json")).get("suite"), None);

    env.write("job/expected-nodes.txt", "# suite: h200-vm-1\na1\na2\n");
    assert_eq!(report("listed", &[]).0, Some(2));
    let fleet = read_json(&env.path("listed/fleet.json"));
    assert_eq!(fleet["suite"], "h200-vm-1");
    assert_eq!(
        verdicts(&fleet),
        pairs(&[("a1", "pass"), ("a2", "refused")])
    );
    assert_eq!(
        fleet["nodes"][1]["why"][0],
        "ran suite easy, not the job's suite h200-vm-1: not judged by the fleet's suite"
    );
    let md = fs::read_to_string(env.path("listed/fleet.md")).unwrap();
    assert!(
        md.contains("Every node was held to the suite h200-vm-1."),
        "{md}"
    );
    // The same by --suite, and a --suite that is not the list's is refused.
    assert_eq!(report("given", &["--suite", "h200-vm-1"]).0, Some(2));
    let (code, err) = report("other", &["--suite", "easy"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--suite easy: the job's node list says its nodes ran suite h200-vm-1"),
        "{err}"
    );
    env.write("job/expected-nodes.txt", "a1\na2\n");
    let (code, _) = report("by-flag", &["--suite", "easy"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        verdicts(&read_json(&env.path("by-flag/fleet.json"))),
        pairs(&[("a1", "refused"), ("a2", "pass")])
    );
    let (code, err) = report("bad", &["--suite", " x"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--suite ' x' is not a suite name"), "{err}");

    // The job's lines, as the Slurm job writes them when it starts.
    let out = env
        .cmd()
        .args(["check", "h200-vm-1", "--job-lines"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines = String::from_utf8(out.stdout).unwrap();
    let digest = lines
        .strip_prefix("# suite: h200-vm-1\n# suite-sha256: ")
        .and_then(|r| r.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(digest.len(), 64, "{lines:?}");
    // A local file of the suite's name with other contents.
    env.write(
        "local/h200-vm-1.toml",
        "format_version = 1\nname = \"h200-vm-1\"\nextends = \"h200-vm-1\"\n\
         description = \"a local copy\"\n",
    );
    let out = env
        .cmd()
        .args(["run", "local/h200-vm-1.toml", "--simulate", "h200-vm-1"])
        .args(["--node-name", "a3", "--seed", "3", "--out", "job/a3", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    env.write("job/expected-nodes.txt", &format!("{lines}a1\na2\na3\n"));
    assert_eq!(report("digest", &[]).0, Some(2));
    let fleet = read_json(&env.path("digest/fleet.json"));
    assert_eq!(fleet["suite_sha256"], digest);
    assert_eq!(
        verdicts(&fleet),
        pairs(&[("a1", "pass"), ("a2", "refused"), ("a3", "refused")])
    );
    assert!(
        fleet["nodes"][2]["why"][0]
            .as_str()
            .unwrap()
            .starts_with("ran other contents under the name of the job's suite h200-vm-1"),
        "{}",
        fleet["nodes"][2]["why"]
    );
    let md = fs::read_to_string(env.path("digest/fleet.md")).unwrap();
    assert!(
        md.contains(&format!(
            "Every node was held to the suite h200-vm-1 (SHA-256 {}).",
            &digest[..12]
        )),
        "{md}"
    );
    // Without the lines, a3 stands with a1 (one each: no majority, both refused by the vote):
    // only the job's digest tells which one ran the suite.
    env.write("job/expected-nodes.txt", "a1\na3\n");
    fs::remove_dir_all(env.path("job/a2")).unwrap();
    assert_eq!(report("vote", &[]).0, Some(2));
    assert_eq!(
        verdicts(&read_json(&env.path("vote/fleet.json"))),
        pairs(&[("a1", "refused"), ("a3", "refused")])
    );
    // --fabric: the digest of the suite as `run --fabric` runs it; a suite with no fabric floor
    // cannot be.
    let out = env
        .cmd()
        .args(["check", "h200-vm-1", "--job-lines", "--fabric"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = env
        .cmd()
        .args(["check", "h100-sxm-8", "--job-lines", "--fabric"])
        .output()
        .unwrap();
    let plain = env
        .cmd()
        .args(["check", "h100-sxm-8", "--job-lines"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_ne!(out.stdout, plain.stdout);
}

/// `fleet report --out` a node's folder would put the fleet's files beside the node's evidence,
/// where neither could be signed: refused before anything is written.
#[test]
fn a_fleet_report_into_a_nodes_folder_is_refused() {
    let env = Env::new();
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "--out",
            "nodes/n01",
            "-q",
        ])
        .assert()
        .code(0);
    env.cmd()
        .args(["fleet", "report", "nodes", "--out", "nodes/n01"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "holds a node report (evidence.json); refusing to write a fleet report beside it",
        ));
    assert!(!env.path("nodes/n01/fleet.json").exists());
}

/// The files a Slurm job's script writes go through nodecert (`__job-file`): a regular file
/// written whole; a FIFO or a link planted at the name is refused, never opened (the shell's
/// `noclobber` opens a FIFO); a new key is its owner's alone.
#[test]
fn a_job_file_is_written_as_nodecert_writes_every_file() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    fs::create_dir_all(env.path("shared")).unwrap();
    env.cmd()
        .args(["__job-file", "shared/expected-nodes.txt"])
        .write_stdin("# job: 7\nn1\n")
        .assert()
        .code(0);
    assert_eq!(env.read("shared/expected-nodes.txt"), "# job: 7\nn1\n");
    let fifo = env.path("shared/planted");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::os::unix::fs::symlink("/etc/passwd", env.path("shared/link")).unwrap();
    for name in ["shared/planted", "shared/link"] {
        env.cmd()
            .args(["__job-file", name])
            .write_stdin("secret\n")
            .timeout(std::time::Duration::from_secs(60))
            .assert()
            .failure();
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    env.cmd()
        .args(["__job-file", "--new-key", "shared/.fabric-key.7"])
        .assert()
        .code(0);
    let meta = fs::metadata(env.path("shared/.fabric-key.7")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let key = env.read("shared/.fabric-key.7");
    assert_eq!(key.trim().len(), 64, "{key}");
    assert!(key.trim().bytes().all(|b| b.is_ascii_hexdigit()));
}

/// A folder whose absolute path is not UTF-8 (the current folder's name here) is refused: its
/// lossy form in the script would name another folder.
#[test]
fn a_slurm_job_in_a_folder_whose_path_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let env = Env::new();
    let odd = env.path("").join(std::ffi::OsStr::from_bytes(b"odd\xff"));
    fs::create_dir_all(&odd).unwrap();
    env.cmd()
        .current_dir(&odd)
        .args(["fleet", "slurm", "--out", "shared", "--nodes", "2"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "a path that is not UTF-8 cannot be written into the script",
        ));
    assert!(!odd.join("shared/nodecert-fleet.sbatch").exists());
}

/// Slurm opens the job's log in --out as the job's user, following links: a folder others can
/// write (where they could plant `slurm-<id>.out` as a link for the next job id) is refused
/// before any script is written, and the same folder made private is accepted.
#[test]
fn a_slurm_job_whose_log_others_could_redirect_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let shared = env.path("shared");
    fs::create_dir_all(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    env.cmd()
        .args(["fleet", "slurm", "--out", "shared", "--nodes", "2"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "Slurm writes the job's log (slurm-<job id>.out) there following links",
        ))
        .stderr(predicates::str::contains(
            "can be written by others (mode 0777)",
        ));
    assert!(!shared.join("nodecert-fleet.sbatch").exists());
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o755)).unwrap();
    env.cmd()
        .args(["fleet", "slurm", "--out", "shared", "--nodes", "2"])
        .assert()
        .code(0);
    assert!(shared.join("nodecert-fleet.sbatch").exists());
}

/// A fleet whose nodes all passed, one flagged as slower than its siblings, opens the
/// `verify --require-pass` gate as `fleet report` exits (0), and says so on stderr.
#[test]
fn a_flagged_fleet_passes_the_gate_with_a_note() {
    let env = Env::new();
    env.cmd()
        .args(["keygen", "--out", "key"])
        .assert()
        .success();
    env.cmd()
        .args(["fleet", "simulate", "--nodes", "5", "--node", "h200-vm-1"])
        .args(["--inject", "n02:slow-compute:factor=0.85", "--out", "fs"])
        .assert()
        .code(0);
    let fleet = read_json(&env.path("fs/fleet/fleet.json"));
    assert_eq!(fleet["verdict"], "flagged");
    env.cmd()
        .args(["sign", "fs/fleet", "--key", "key"])
        .assert()
        .code(0);
    env.cmd()
        .args([
            "verify",
            "fs/fleet",
            "--pubkey",
            "key.pub",
            "--require-pass",
        ])
        .args(["--allow-simulated"])
        .assert()
        .code(0)
        .stderr(
            "note: --require-pass: every node passed, and 1 was flagged as slower than its \
             siblings (within its floors)\n",
        );
}

/// `fleet drain --pubkey` (or `--allowed-signers`) acts only on a fleet report whose signature
/// verifies, on the bytes it seals: another key, a changed fleet.json, or an unsigned report is
/// refused (exit 4) and drains nothing. Without them a drain that runs warns that the report is
/// not verified.
#[test]
fn a_drain_with_a_trusted_key_acts_only_on_a_fleet_report_that_verifies() {
    let env = Env::new();
    for k in ["key", "other"] {
        env.cmd().args(["keygen", "--out", k]).assert().success();
    }
    for (name, fault) in [("a1", None), ("a2", Some("ecc-uncorrectable"))] {
        let mut c = env.cmd();
        // As tasks of job 42, which the node list names.
        c.args(["run", "--simulate", "h200-vm-1", "--node-name", name, "-q"])
            .args(["--out", &format!("nodes/{name}")])
            .env("SLURM_JOB_ID", "42");
        if let Some(f) = fault {
            c.args(["--inject", f]);
        }
        c.assert().code(if fault.is_some() { 1 } else { 0 });
    }
    env.write("nodes/expected-nodes.txt", "# job: 42\na1\na2\n");
    env.cmd()
        .args([
            "fleet",
            "report",
            "nodes",
            "--out",
            "signed",
            "--sign-key",
            "key",
        ])
        .assert()
        .code(1);
    env.cmd()
        .args(["fleet", "report", "nodes", "--out", "unsigned"])
        .assert()
        .code(1);
    let drain = |fleet: &str, extra: &[&str]| {
        let o = env
            .cmd()
            .args(["fleet", "drain", fleet, "--slurm", "--dry-run"])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let drains_a2 = |out: &str| {
        out.lines()
            .any(|l| l.starts_with("scontrol update NodeName=a2 State=DRAIN"))
    };
    for fleet in ["signed", "signed/fleet.json"] {
        let (code, out, err) = drain(fleet, &["--pubkey", "key.pub"]);
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(drains_a2(&out), "{out}");
        assert_eq!(err, "");
    }
    // The job named: this report's is 42; another job's drain refuses it (a report copied in
    // from an earlier job verifies as well).
    let (code, out, _) = drain("signed", &["--pubkey", "key.pub", "--job", "42"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(drains_a2(&out), "{out}");
    let (code, out, err) = drain("signed", &["--pubkey", "key.pub", "--job", "41"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(!out.contains("scontrol"), "{out}");
    assert_eq!(
        err,
        "error: not draining: the fleet report is of job 42, not 41\n"
    );
    for (fleet, key) in [("signed", "other.pub"), ("unsigned", "key.pub")] {
        let (code, out, err) = drain(fleet, &["--pubkey", key]);
        assert_eq!(code, Some(4), "{fleet} {key}: {out}{err}");
        assert!(!out.contains("scontrol"), "{out}");
        assert!(
            err.starts_with("error: not draining: the fleet report does not verify: "),
            "{err}"
        );
    }
    // Another file beside the signed one is not what the signature seals.
    fs::copy(
        env.path("signed/fleet.json"),
        env.path("signed/old-fleet.json"),
    )
    .unwrap();
    let (code, out, err) = drain("signed/old-fleet.json", &["--pubkey", "key.pub"]);
    assert_eq!(code, Some(4), "{out}");
    assert!(
        err.contains("is not the fleet.json a signature seals"),
        "{err}"
    );
    fs::remove_file(env.path("signed/old-fleet.json")).unwrap();
    // fleet.json changed after it was signed: a node's reason, the drain's own words.
    let json = env.read("signed/fleet.json");
    env.write("signed/fleet.json", &json.replacen("ECC", "EC C", 1));
    assert_ne!(env.read("signed/fleet.json"), json);
    let (code, out, _) = drain("signed", &["--pubkey", "key.pub"]);
    assert_eq!(code, Some(4), "{out}");
    assert!(!out.contains("scontrol"), "{out}");
    // Unverified and run (not a dry run): said first.
    let o = env
        .cmd()
        .args(["fleet", "drain", "unsigned", "--slurm"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with(
            "warning: unsigned is not verified against a trusted signer: whoever can write it \
             chooses which nodes are drained"
        ),
        "{err}"
    );
}

/// A fleet report's folder chosen by mistake keeps its files: a fleet.md of someone's (no
/// nodecert fleet.json beside it) is refused before anything is read, exit 2; the fleet's own
/// folder is written again as always.
#[test]
fn fleet_report_refuses_a_folder_holding_files_nodecert_did_not_write() {
    let env = Env::new();
    env.cmd()
        .args(["fleet", "simulate", "--nodes", "2", "--node", "h200-vm-1"])
        .args(["--out", "fs"])
        .assert()
        .code(0);
    env.write("notes/fleet.md", "# my fleet notes\n");
    let o = env
        .cmd()
        .args(["fleet", "report", "fs/n01", "fs/n02", "--out", "notes"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("fleet.md: exists and is not a file nodecert wrote"),
        "{err}"
    );
    assert_eq!(env.read("notes/fleet.md"), "# my fleet notes\n");
    assert!(!env.path("notes/fleet.json").exists());
    // Its own folder again: every file replaced, nothing refused.
    env.cmd()
        .args(["fleet", "report", "fs/n01", "fs/n02", "--out", "fs/fleet"])
        .assert()
        .code(0);
    // And a page of its own beside no fleet.json (removed) carries nodecert's mark.
    fs::remove_file(env.path("fs/fleet/fleet.json")).unwrap();
    env.cmd()
        .args(["fleet", "report", "fs/n01", "fs/n02", "--out", "fs/fleet"])
        .assert()
        .code(0);
}
