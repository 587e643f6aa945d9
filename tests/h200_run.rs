//! nodecert's own evidence from its first run on a real H200 (tests/fixtures/h200-nodecert-run,
//! 2026-12-04): whatever the code becomes, the evidence a real node gave must keep reading,
//! rendering, signing as a certificate of hardware (not of a simulation), verifying and
//! comparing.

mod util;

use std::path::{Path, PathBuf};
use util::{copy_dir, out_text, read_json, Env};

fn fixture(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200-nodecert-run")
        .join(sub)
}

/// The suite's report folder, copied into the test's temp dir.
fn report(env: &Env) -> PathBuf {
    let dir = env.path("report");
    copy_dir(&fixture("report"), &dir);
    dir
}

#[test]
fn the_real_evidence_is_real_and_says_what_the_gpu_measured() {
    let ev = read_json(&fixture("report/evidence.json"));
    assert_eq!(ev["simulated"], false);
    assert_eq!(ev["backend"]["simulated"], false);
    assert_eq!(ev["verdict"], "pass");
    let compute = ev["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "compute")
        .expect("compute check");
    assert_eq!(compute["status"], "warn");
    let bf16 = compute["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "bf16_tflops")
        .expect("bf16 rate");
    let rate = bf16["median"].as_f64().unwrap();
    assert!((800.0..900.0).contains(&rate), "{rate}");
}

#[test]
fn the_real_evidence_renders_without_a_simulated_label() {
    let env = Env::new();
    let dir = report(&env);
    env.cmd()
        .arg("render")
        .arg(dir.join("evidence.json"))
        .arg("--out")
        .arg(env.path("pages"))
        .assert()
        .success();
    for page in ["report.html", "report.md"] {
        let text = env.read(&format!("pages/{page}"));
        assert!(text.contains("NVIDIA H200"), "{page}");
        assert!(
            !text.contains("SIMULATED"),
            "{page} of real hardware says SIMULATED"
        );
        // The warning of that day is on the page with its figure.
        assert!(text.contains("5.2%"), "{page}");
    }
}

#[test]
fn the_real_evidence_signs_as_hardware_and_verifies() {
    let env = Env::new();
    let dir = report(&env);
    env.cmd()
        .args(["render"])
        .arg(dir.join("evidence.json"))
        .assert()
        .success();
    env.cmd()
        .args(["keygen", "--out"])
        .arg(env.path("key"))
        .assert()
        .success();
    let signed = env
        .cmd()
        .arg("sign")
        .arg(&dir)
        .arg("--key")
        .arg(env.path("key"))
        .assert()
        .success();
    let out = out_text(&signed);
    assert!(!out.contains("SIMULATED"), "{out}");
    let verified = env
        .cmd()
        .arg("verify")
        .arg(&dir)
        .arg("--pubkey")
        .arg(env.path("key.pub"))
        .assert()
        .success();
    let out = String::from_utf8_lossy(&verified.get_output().stdout).to_string();
    assert!(out.contains("VERIFIED"), "{out}");
    assert!(!out.contains("SIMULATED"), "{out}");
    // A pass of real hardware is what --require-pass lets through.
    env.cmd()
        .arg("verify")
        .arg(&dir)
        .arg("--pubkey")
        .arg(env.path("key.pub"))
        .arg("--require-pass")
        .assert()
        .code(0)
        .stderr("");
    // A changed figure no longer verifies, with --require-pass or without.
    let ev = env
        .read("report/evidence.json")
        .replace("\"pass\"", "\"fail\"");
    env.write("report/evidence.json", &ev);
    for extra in [&[][..], &["--require-pass"][..]] {
        env.cmd()
            .arg("verify")
            .arg(&dir)
            .arg("--pubkey")
            .arg(env.path("key.pub"))
            .args(extra)
            .assert()
            .code(4);
    }
}

#[test]
fn a_real_run_compared_with_itself_has_no_regression_and_with_a_simulated_one_says_so() {
    let env = Env::new();
    let dir = report(&env);
    env.cmd()
        .arg("diff")
        .arg(&dir)
        .arg(&dir)
        .arg("--out")
        .arg(env.path("same"))
        .assert()
        .success();
    let same = env.read("same/diff.md");
    assert!(!same.contains("SIMULATED"), "{same}");
    // The simulated node of the same kind: the diff marks that side simulated.
    env.cmd()
        .args(["run", "h200-vm-1", "--simulate", "h200-vm-1", "--out"])
        .arg(env.path("sim"))
        .assert()
        .success();
    let out = env
        .cmd()
        .arg("diff")
        .arg(&dir)
        .arg(env.path("sim"))
        .arg("--out")
        .arg(env.path("vs-sim"))
        .output()
        .unwrap();
    let console = String::from_utf8_lossy(&out.stdout);
    assert!(console.contains("SIMULATED"), "{console}");
    assert!(env.read("vs-sim/diff.md").contains("SIMULATED"));
}
