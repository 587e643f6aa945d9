//! The verdict knows what ran: an interrupted run is incomplete (exit 5), a run that judged
//! nothing is "nothing judged" (exit 6), a suite with no check is invalid input (exit 2), and
//! "simulated" cannot be forged by editing one field. Old (format 1) certificates still render
//! and verify.

mod util;

use predicates::prelude::*;
use std::path::Path;
use util::{copy_dir, read_json, Env};

/// A finished simulated run of the 1x H200 VM suite in `out`.
fn run_h200(env: &Env, out: &str) {
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "--out",
            out,
            "-q",
        ])
        .assert()
        .code(0);
}

/// Edit `out/evidence.json` as a crash during the last check leaves it: state running, no end
/// time, the last check without a record. Returns the id of that check.
fn interrupt(env: &Env, out: &str) -> String {
    let p = env.path(&format!("{out}/evidence.json"));
    let mut v = read_json(&p);
    let checks = v["checks"].as_array_mut().expect("checks");
    let last = checks.pop().expect("a check");
    v["state"] = "running".into();
    v["finished_at"] = serde_json::Value::Null;
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    last["id"].as_str().unwrap().to_string()
}

fn keygen(env: &Env) {
    env.cmd()
        .args(["keygen", "--out", "k", "--comment", "ops@example.com"])
        .assert()
        .code(0);
}

#[test]
fn interrupted_run_is_incomplete_everywhere_and_signed_only_as_such() {
    let env = Env::new();
    run_h200(&env, "r");
    let missing = interrupt(&env, "r");
    let out = env
        .cmd()
        .args([
            "render",
            "r",
            "--out",
            "again",
            "--junit",
            "j.xml",
            "--prometheus",
            "p.prom",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("never ran") && stderr.contains(&missing),
        "{stderr}"
    );
    let md = env.read("again/report.md");
    assert!(md.contains("**INCOMPLETE (SIMULATED)**"), "{md}");
    assert!(md.contains(&format!("never ran: {missing}")), "{md}");
    assert!(env.read("again/report.html").contains("INCOMPLETE"));
    let junit = env.read("j.xml");
    assert!(
        junit.contains(&format!(
            r#"classname="nodecert.never_ran" name="{missing}""#
        )),
        "{junit}"
    );
    assert!(junit.contains("<failure type=\"incomplete\""), "{junit}");
    assert!(!junit.contains(r#"failures="0""#), "{junit}");
    let prom = env.read("p.prom");
    assert!(prom.contains("\nnodecert_run_pass{"), "{prom}");
    let pass_line = prom
        .lines()
        .find(|l| l.starts_with("nodecert_run_pass{"))
        .unwrap();
    assert!(pass_line.ends_with(" 0"), "{pass_line}");
    assert!(
        prom.lines().any(|l| l.starts_with("nodecert_run_verdict{")
            && l.contains("verdict=\"incomplete\"")
            && l.ends_with(" 1")),
        "{prom}"
    );

    // sign refuses it, and leaves the folder unsigned.
    keygen(&env);
    let out = env
        .cmd()
        .args(["sign", "r", "--key", "k"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-incomplete"));
    assert!(!env.path("r/nodecert-manifest.txt").exists());

    // A first signature that fails after its pages were rendered again to name it (here: a
    // stray signature with no manifest) leaves the pages as they were, and no manifest.
    let before = (env.read("r/report.md"), env.read("r/report.html"));
    env.write("r/nodecert-manifest.txt.sig", "stray\n");
    let out = env
        .cmd()
        .args(["sign", "r", "--key", "k", "--allow-incomplete"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing, but nodecert-manifest.txt.sig"),
        "{out:?}"
    );
    assert_eq!((env.read("r/report.md"), env.read("r/report.html")), before);
    assert!(!env.path("r/nodecert-manifest.txt").exists());
    std::fs::remove_file(env.path("r/nodecert-manifest.txt.sig")).unwrap();

    // With the flag it signs, and the title says so.
    env.cmd()
        .args(["sign", "r", "--key", "k", "--allow-incomplete"])
        .assert()
        .code(0);
    let md = env.read("r/report.md");
    assert!(
        md.contains("**INCOMPLETE (SIMULATED; signed as incomplete)**"),
        "{md}"
    );
    assert!(env
        .read("r/report.html")
        .contains("INCOMPLETE (SIMULATED; signed as incomplete)"));
    // It verifies, and verify says what it certifies: an incomplete run, never a pass.
    env.cmd()
        .args(["verify", "r", "--pubkey", "k.pub"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("\nverdict: INCOMPLETE (SIMULATED) as this nodecert judges its records (evidence.json states PASS)"))
        .stdout(predicate::str::contains("finished: never (the run did not finish)"));
}

#[test]
fn a_suite_with_no_enabled_check_is_invalid_input() {
    let env = Env::new();
    env.write(
        "empty.toml",
        "format_version = 1\nname = \"empty\"\n\n[checks]\n",
    );
    env.write(
        "none.toml",
        "format_version = 1\nname = \"none\"\nextends = \"base\"\n\n[checks.topology]\nenabled = false\n\n[checks.virtualization]\nenabled = false\n\n[checks.health]\nenabled = false\n\n[checks.network]\nenabled = false\n",
    );
    for (file, line) in [("empty.toml", 4), ("none.toml", 5)] {
        for args in [
            vec!["check", file],
            vec!["run", file, "--simulate", "h200-vm-1", "--out", "r"],
        ] {
            let out = env.cmd().args(&args).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("{file}:{line}:")) && err.contains("enables no check"),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn a_run_where_every_check_skips_judged_nothing() {
    let env = Env::new();
    // Peer checks only, on a node with one GPU: each says "skipped: no peer pairs".
    env.write(
        "peers.toml",
        "format_version = 1\nname = \"peers-only\"\n\n[checks.p2p_bandwidth]\nread = { fail_below = 1.0 }\n\n[checks.p2p_latency]\nlatency_us = { fail_above = 100.0 }\n",
    );
    keygen(&env);
    let out = env
        .cmd()
        .args([
            "run",
            "peers.toml",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--sign-key",
            "k",
            "--junit",
            "j.xml",
            "--prometheus",
            "p.prom",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOTHING JUDGED"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not signed"));
    assert!(!env.path("r/nodecert-manifest.txt").exists());
    assert_eq!(
        read_json(&env.path("r/evidence.json"))["verdict"],
        "nothing_judged"
    );
    assert!(env
        .read("j.xml")
        .contains(r#"classname="nodecert.run" name="judged""#));
    assert!(env
        .read("p.prom")
        .lines()
        .any(|l| l.contains("verdict=\"nothing_judged\"") && l.ends_with(" 1")));
    env.cmd()
        .args(["render", "r", "--out", "again"])
        .assert()
        .code(6);
    env.cmd().args(["sign", "r", "--key", "k"]).assert().code(6);
    env.cmd()
        .args(["sign", "r", "--key", "k", "--allow-incomplete"])
        .assert()
        .code(0);
    assert!(env
        .read("r/report.md")
        .contains("NOTHING JUDGED (SIMULATED; signed as nothing judged)"));
}

#[test]
fn forged_simulated_false_is_refused_at_render_sign_and_verify() {
    let env = Env::new();
    run_h200(&env, "r");
    let p = env.path("r/evidence.json");
    let mut v = read_json(&p);
    v["simulated"] = false.into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let out = env
        .cmd()
        .args(["render", "r", "--out", "again"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("inconsistent simulated status"), "{err}");
    assert!(err.contains("backend.simulated is true"), "{err}");
    keygen(&env);
    env.cmd().args(["sign", "r", "--key", "k"]).assert().code(2);
    assert!(!env.path("r/nodecert-manifest.txt").exists());

    // Forged after signing: verify names the disagreement.
    let env = Env::new();
    keygen(&env);
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "--out",
            "s",
            "-q",
            "--sign-key",
            "k",
        ])
        .assert()
        .code(0);
    let p = env.path("s/evidence.json");
    let mut v = read_json(&p);
    v["simulated"] = false.into();
    v["backend"]["simulated"] = false.into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let out = env
        .cmd()
        .args(["verify", "s", "--pubkey", "k.pub"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}

#[test]
fn format_1_certificates_still_verify_and_render() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/evidence-v1");
    let env = Env::new();
    copy_dir(&fixture.join("cert"), &env.path("cert"));
    std::fs::copy(fixture.join("signer.key.pub"), env.path("signer.key.pub")).unwrap();
    assert_eq!(
        read_json(&env.path("cert/evidence.json"))["format_version"],
        1
    );
    env.cmd()
        .args(["verify", "cert", "--pubkey", "signer.key.pub"])
        .assert()
        .code(0);
    env.cmd()
        .args(["render", "cert", "--out", "again"])
        .assert()
        .code(0);
    assert!(env.read("again/report.md").contains("**PASS (SIMULATED)**"));

    // A format-1 file that says pass for a run that never finished reads as incomplete.
    copy_dir(&fixture.join("cert"), &env.path("old"));
    std::fs::remove_file(env.path("old/nodecert-manifest.txt")).unwrap();
    std::fs::remove_file(env.path("old/nodecert-manifest.txt.sig")).unwrap();
    let p = env.path("old/evidence.json");
    let mut v = read_json(&p);
    assert_eq!(v["verdict"], "pass");
    v["state"] = "running".into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    env.cmd()
        .args(["render", "old", "--out", "old2"])
        .assert()
        .code(5);
    assert!(env
        .read("old2/report.md")
        .contains("**INCOMPLETE (SIMULATED)**"));
}

#[test]
fn notes_alone_judge_nothing() {
    // An Ethernet fabric asked of an InfiniBand node: every NIC is "not part of the fabric", a
    // note; the network check skips, and the run judged nothing (6), not a pass.
    let env = Env::new();
    env.write(
        "eth.toml",
        "format_version = 1\nname = \"eth-only\"\n\n[network]\nlink_layer = \"ethernet\"\n\n[checks.network]\n",
    );
    let out = env
        .cmd()
        .args(["run", "eth.toml", "--simulate", "h100-sxm-8", "--out", "r"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let ev = read_json(&env.path("r/evidence.json"));
    assert_eq!(ev["verdict"], "nothing_judged");
    let findings = ev["checks"][0]["findings"].as_array().unwrap();
    assert!(!findings.is_empty());
    assert!(findings.iter().all(|f| f["info"] == true), "{findings:?}");
}

#[test]
fn a_run_that_missed_readings_is_partial_not_a_pass() {
    // A VM that hides every GPU counter: the health check judges the driver alone.
    let env = Env::new();
    let text = nodecert::backend::sim::EMBEDDED
        .iter()
        .find(|(n, _)| *n == "h200-vm-1")
        .unwrap()
        .1;
    env.write(
        "vm.toml",
        &format!(
            "{text}\n[[unavailable]]\nreadings = [\"ecc_mode\", \"ecc_errors\", \"remapped_rows\", \"xids\", \"pcie_replays\", \"throttle_reasons\", \"temperature\", \"processes\"]\n"
        ),
    );
    let vm = env.path("vm.toml");
    let out = env
        .cmd()
        .args(["run", "h200-vm-1", "--simulate"])
        .arg(&vm)
        .args(["--out", "r", "--junit", "j.xml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{stdout}");
    assert!(stdout.contains("PARTIAL: node did not pass"), "{stdout}");
    assert!(
        stdout.contains(
            "partial: 1 of 9 promised checks left readings unjudged: health (1 of 9 judged)"
        ),
        "{stdout}"
    );
    let ev = read_json(&env.path("r/evidence.json"));
    assert_eq!(ev["verdict"], "partial");
    assert_eq!(ev["format_version"], 6);
    assert!(env.read("r/report.md").contains("PARTIAL"));
    let junit = env.read("j.xml");
    assert!(
        junit.contains(r#"classname="nodecert.coverage" name="health""#),
        "{junit}"
    );
    // Rendered again, the verdict and its exit code hold.
    env.cmd()
        .args(["render", "r", "--out", "again"])
        .assert()
        .code(7);
    // The same folder as a nodecert from before PARTIAL left it: evidence format 5 stating
    // PASS, pages saying PASS. Signed now, the pages are rendered again first: the signature
    // never seals a page that says PASS of a partial run.
    copy_dir(&env.path("r"), &env.path("old"));
    let p = env.path("old/evidence.json");
    let mut v = read_json(&p);
    v["verdict"] = "pass".into();
    v["format_version"] = 5.into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    for page in ["old/report.md", "old/report.html"] {
        env.write(page, &env.read(page).replace("PARTIAL", "PASS"));
    }
    assert!(!env.read("old/report.md").contains("PARTIAL"));
    keygen(&env);
    let out = env
        .cmd()
        .args(["sign", "old", "--key", "k"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("it states PASS, and its records make it PARTIAL here"),
        "{stderr}"
    );
    assert!(env.read("old/report.md").contains("PARTIAL"));
    assert!(env.read("old/report.html").contains("PARTIAL"));
    env.cmd()
        .args(["verify", "old", "--pubkey", "k.pub"])
        .assert()
        .code(0);
    // The same stale folder with pages rendered again from the user's templates: the first
    // signature renders them again from the evidence, with the templates the signer names.
    copy_dir(&env.path("r"), &env.path("mine"));
    let p = env.path("mine/evidence.json");
    let mut v = read_json(&p);
    v["verdict"] = "pass".into();
    v["format_version"] = 5.into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    env.write("t/report.md.j2", "mine: {{ v.verdict }}\n");
    env.cmd()
        .args(["render", "mine", "--templates", "t", "--out", "mine"])
        .assert()
        .code(7);
    assert_eq!(env.read("mine/report.md"), "mine: PARTIAL (SIMULATED)\n");
    let out = env
        .cmd()
        .args(["sign", "mine", "--key", "k", "--templates", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("embedded templates"));
    assert_eq!(env.read("mine/report.md"), "mine: PARTIAL (SIMULATED)\n");
    // A file that states PASS while its records fail was edited: not signed.
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--out",
            "edited",
        ])
        .args(["--inject", "ecc-uncorrectable:gpu=0"])
        .assert()
        .code(1);
    let p = env.path("edited/evidence.json");
    let mut v = read_json(&p);
    v["verdict"] = "pass".into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    env.cmd()
        .args(["sign", "edited", "--key", "k"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "evidence.json states PASS, but its records make it FAIL",
        ));
    assert!(!env.path("edited/nodecert-manifest.txt").exists());
    // Nor one edited to say INCOMPLETE: anything milder than its records' failure.
    let mut v = read_json(&p);
    v["verdict"] = "incomplete".into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    env.cmd()
        .args(["sign", "edited", "--key", "k"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "evidence.json states INCOMPLETE, but its records make it FAIL",
        ));
    // The same node with its readings: a plain pass.
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--out",
            "full",
        ])
        .assert()
        .code(0);
}

/// A promise the node cannot be held to is a judgement not made, so the run is PARTIAL (exit
/// 7), never a pass: a mode the suite promises that the node cannot tell, bus bandwidth floors
/// on one rank, a scaling floor on one GPU.
#[test]
fn promises_a_one_gpu_vm_cannot_be_held_to_make_the_run_partial() {
    let env = Env::new();
    let node = nodecert::backend::sim::EMBEDDED
        .iter()
        .find(|(n, _)| *n == "h200-vm-1")
        .unwrap()
        .1;
    let unknown = node.replace("mode = \"passthrough\"", "mode = \"unknown\"");
    assert_ne!(unknown, node);
    env.write("vm.toml", &unknown);
    env.write(
        "busbw.toml",
        "format_version = 1\nname = \"busbw\"\nextends = \"h200-vm-1\"\n\
         [checks.collective.all_reduce]\nmin_busbw_gbps = { \"1GiB\" = 400.0 }\n",
    );
    env.write(
        "scaling.toml",
        "format_version = 1\nname = \"scaling\"\nextends = \"h200-vm-1\"\n\
         [checks.training]\nmin_scaling_efficiency = 0.8\n",
    );
    let vm = env.path("vm.toml").display().to_string();
    for (suite, node, check, why) in [
        (
            "h200-vm-1",
            vm.as_str(),
            "virtualization",
            "not available here: a hypervisor, Firecracker (KVM), is present",
        ),
        (
            "busbw.toml",
            "h200-vm-1",
            "collective",
            "the suite's 1 bus bandwidth floor was not judged",
        ),
        (
            "scaling.toml",
            "h200-vm-1",
            "training",
            "scaling efficiency needs two GPUs or more; this node has 1",
        ),
    ] {
        let out = env
            .cmd()
            .args(["run", suite, "--simulate", node, "--out", "r", "--force"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(7), "{suite}: {stdout}");
        assert!(stdout.contains("PARTIAL: node did not pass"), "{stdout}");
        let ev = read_json(&env.path("r/evidence.json"));
        assert_eq!(ev["verdict"], "partial");
        let c = ev["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"].as_str().unwrap().starts_with(check))
            .unwrap_or_else(|| panic!("{check}"));
        let reasons: Vec<&str> = c["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["status"] == "skip")
            .filter_map(|f| f["reason"].as_str())
            .collect();
        assert!(
            reasons.iter().any(|r| r.contains(why)),
            "{suite}: {reasons:?}"
        );
    }
}

/// A suite that holds peer pairs to bounds, run on a node of one GPU, has promised judgements
/// that cannot run there: partial, naming them, never a pass. A suite that states none for them
/// skips the checks as before; a bound on H2D with all GPUs at once is judged on the one GPU.
#[test]
fn bounds_a_one_gpu_node_cannot_be_held_to_are_partial_and_all_gpus_is_judged() {
    let env = Env::new();
    env.write(
        "p2p.toml",
        "format_version = 1\nname = \"p2p\"\nextends = \"base\"\n\
         [checks.p2p_bandwidth]\nread = { fail_below = 335.0 }\n\
         [checks.p2p_latency]\nlatency_us = { fail_above = 10.0 }\n",
    );
    env.cmd()
        .args([
            "run",
            "p2p.toml",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--out",
            "p",
        ])
        .assert()
        .code(7);
    let ev = read_json(&env.path("p/evidence.json"));
    let check = |id: &str| {
        ev["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()
            .clone()
    };
    let bw = check("p2p_bandwidth");
    assert_eq!(bw["status"], "skip");
    assert_eq!(bw["coverage"]["total"], 1);
    assert!(
        bw["summary"].as_str().unwrap().contains(
            "the node has 1 GPU, so no peer pair is held to the suite's read >= 335 GB/s"
        ),
        "{bw}"
    );
    assert!(check("p2p_latency")["summary"]
        .as_str()
        .unwrap()
        .contains("latency <= 10 us"));
    // No bound stated: skipped, judged by nothing, and the run keeps its verdict.
    env.write(
        "plain.toml",
        "format_version = 1\nname = \"plain\"\nextends = \"h200-vm-1\"\n[checks.p2p_latency]\n",
    );
    env.cmd()
        .args([
            "run",
            "plain.toml",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--out",
            "q",
        ])
        .assert()
        .code(0);
    env.write(
        "all.toml",
        "format_version = 1\nname = \"all\"\nextends = \"h200-vm-1\"\n\
         [checks.host_bandwidth]\nall_gpus_h2d = { fail_below = 60.0 }\n",
    );
    env.cmd()
        .args([
            "run",
            "all.toml",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--out",
            "a",
        ])
        .assert()
        .code(1);
    let ev = read_json(&env.path("a/evidence.json"));
    let hb = ev["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "host_bandwidth")
        .unwrap();
    assert!(
        hb["summary"]
            .as_str()
            .unwrap()
            .contains("GPU 0: host-to-device with all GPUs at once"),
        "{hb}"
    );
}
