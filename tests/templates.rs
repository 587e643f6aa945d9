//! `--templates`: checked before the run (exit 2, file, line and column), bounded by fuel, and a
//! page that fails only on the real evidence keeps the run's evidence and says how to render.

mod util;

use predicates::prelude::*;
use std::time::Duration;
use util::Env;

/// Long enough for a simulated run on a loaded machine, far shorter than a hang.
const QUICK: Duration = Duration::from_secs(120);

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_missing_templates_folder_is_invalid_input_before_anything_runs() {
    let env = Env::new();
    for args in [
        &[
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--templates",
            "nope",
        ][..],
        &["render", "r/evidence.json", "--templates", "nope"][..],
    ] {
        env.cmd()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--templates nope: not a folder"));
        assert!(!env.path("r").exists(), "{args:?}: nothing was run");
    }
}

#[test]
fn a_template_error_names_file_line_and_column_before_the_run() {
    let env = Env::new();
    env.write(
        "t/report.md.j2",
        "# {{ v.verdict }}\nab {{ ev.no_such_field }}\n",
    );
    let o = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h200-sxm-8",
            "--out",
            "r",
            "--templates",
            "t",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let want = format!(
        "{}:2:7:",
        std::path::Path::new("t").join("report.md.j2").display()
    );
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert!(stderr(&o).contains("undefined"), "{}", stderr(&o));
    // Found on the sample evidence: the node was never run.
    assert!(!env.path("r").exists());
    // The same for render, before it writes anything.
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--out", "ok", "-q"])
        .assert()
        .code(0);
    env.cmd()
        .args(["render", "ok", "--out", "again", "--templates", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(want));
    assert!(!env.path("again").exists());
}

#[test]
fn a_nested_loop_in_a_template_stops_on_fuel_instead_of_hanging() {
    let env = Env::new();
    env.write(
        "t/report.html.j2",
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}",
    );
    let o = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--templates",
            "t",
        ])
        .timeout(QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("ran out of fuel"), "{}", stderr(&o));
    assert!(stderr(&o).contains("report.html.j2:1:"), "{}", stderr(&o));
}

/// A template that works on the sample evidence (one GPU, nothing failed) and fails on a run
/// that has a failure: it reads a field only findings of a failed check lack.
const FAILS_ON_A_FAILURE: &str = "{% for c in ev.checks %}{% if c.status == 'fail' %}\
     {{ c.no_such_field }}{% endif %}{% endfor %}done {{ v.verdict }}\n";

#[test]
fn a_template_that_fails_after_a_complete_run_keeps_the_evidence_and_says_how_to_render() {
    let env = Env::new();
    // An earlier run's reports in the same folder must not stay beside the new evidence.
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--out", "r", "-q"])
        .assert()
        .code(0);
    assert!(env.path("r/report.html").exists());
    env.write("t/report.md.j2", FAILS_ON_A_FAILURE);
    env.cmd().args(["keygen", "--out", "k"]).assert().success();
    let o = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--templates",
            "t",
        ])
        .args(["--inject", "ecc-uncorrectable:gpu=0", "--sign-key", "k"])
        .args(["--junit", "j.xml"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("report.md.j2:1:"), "{err}");
    assert!(err.contains("the run finished (FAIL)"), "{err}");
    assert!(err.contains("not signed"), "{err}");
    assert!(
        err.contains("nodecert render r/evidence.json --templates t"),
        "{err}"
    );
    assert!(err.contains("nodecert sign r --key k"), "{err}");
    // The evidence of this run is kept, complete; no report, no signature over missing pages.
    let ev = util::read_json(&env.path("r/evidence.json"));
    assert!(
        ev["finished_at"].is_string(),
        "complete evidence: {}",
        ev["finished_at"]
    );
    assert!(!env.path("r/report.html").exists(), "stale report removed");
    assert!(!env.path("r/report.md").exists());
    assert!(!env.path("r/nodecert-manifest.txt").exists());
    // The verdict was shown, and the exports written: they need no template.
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAIL"));
    assert!(env.path("j.xml").is_file());
    // The hint works once the template is fixed: render, then sign.
    env.write("t/report.md.j2", "fixed {{ v.verdict }}\n");
    env.cmd()
        .args(["render", "r/evidence.json", "--templates", "t"])
        .assert()
        .code(1);
    assert!(env.read("r/report.md").starts_with("fixed FAIL"));
    env.cmd()
        .args(["sign", "r", "--key", "k"])
        .assert()
        .success();
    env.cmd()
        .args(["verify", "r", "--pubkey", "k.pub"])
        .assert()
        .success();
}

#[test]
fn templates_that_need_a_signature_are_tried_with_one() {
    let env = Env::new();
    env.write(
        "t/report.md.j2",
        "{{ signing.fingerprint | length }} {{ signing.fingerprint }} {{ v.verdict }}\n",
    );
    // Without --sign-key the sample has no fingerprint: `length` of none fails, before the run.
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--templates",
            "t",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("report.md.j2:1:"));
    env.cmd().args(["keygen", "--out", "k"]).assert().success();
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--templates",
            "t",
        ])
        .args(["--sign-key", "k", "-q"])
        .assert()
        .code(0);
    assert!(env.read("r/report.md").contains(" SHA256:"));
}
