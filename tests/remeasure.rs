//! The re-measure policy and the figures' conventions, through the binary: a transient miss
//! passes on a later attempt only when the suite allows one, a persistent miss fails after every
//! attempt, wrong data is never measured again, and the report says which attempt decided and
//! how each bandwidth figure counts.

mod util;
use predicates::prelude::*;
use std::path::Path;
use util::{read_json, Env};

const TRANSIENT: &str = "slow-gpu-pair:gpu=0,peer=1,attempts=1";

/// A suite on the simulated l40s-pcie-4 with `extra` appended.
fn suite(env: &Env, extra: &str) -> String {
    env.write(
        "s.toml",
        &format!("format_version = 1\nname = \"retry\"\nextends = \"l40s-pcie-4\"\n{extra}"),
    );
    "s.toml".into()
}

fn run(env: &Env, suite: &str, faults: &[&str], out: &str, code: i32) -> serde_json::Value {
    let mut c = env.cmd();
    c.args([
        "run",
        "--simulate",
        "l40s-pcie-4",
        suite,
        "-q",
        "--out",
        out,
    ]);
    for f in faults {
        c.args(["--inject", f]);
    }
    c.assert().code(code);
    read_json(&env.path(&format!("{out}/evidence.json")))
}

/// The ids of the records with a finding whose reason contains `text`, in order.
fn naming<'a>(checks: &'a [serde_json::Value], text: &str) -> Vec<&'a str> {
    checks
        .iter()
        .filter(|c| {
            c["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["reason"].as_str().unwrap().contains(text))
        })
        .map(|c| c["id"].as_str().unwrap())
        .collect()
}

fn p2p(ev: &serde_json::Value) -> &serde_json::Value {
    util::check_json(ev, "p2p_bandwidth")
}

#[test]
fn a_transient_miss_passes_with_remeasure_and_fails_without() {
    let env = Env::new();
    let s = suite(&env, "[checks.p2p_bandwidth]\nremeasure = 1\n");
    let ev = run(&env, &s, &[TRANSIENT], "retried", 0);
    let c = p2p(&ev);
    assert_eq!(c["status"], "pass");
    assert_eq!(
        c["summary"].as_str().unwrap(),
        "passed on attempt 2 of 2, after 1 miss: 34 of 34 judgements within limits"
    );
    assert_eq!(c["remeasure"]["allowed"], 2);
    assert_eq!(c["remeasure"]["decided_by"], 2);
    let miss = &c["remeasure"]["earlier"][0];
    assert_eq!(
        (&miss["attempt"], &miss["status"]),
        (&1.into(), &"fail".into())
    );
    assert!(!miss["metrics"].as_array().unwrap().is_empty());
    let md = env.read("retried/report.md");
    assert!(md.contains("## Re-measured checks"), "{md}");
    assert!(md.contains("| 2 (decided) | **PASS** | passed on attempt 2 of 2, after 1 miss"));
    assert!(md.contains("| 1 | **FAIL** | GPU 0 -> GPU 1: peer read"));
    let html = env.read("retried/report.html");
    assert!(html.contains("<h2 id=\"remeasured\">Re-measured checks</h2>"));
    // A re-measured certificate renders again from its evidence alone.
    env.cmd()
        .args(["render", "retried", "--out", "again"])
        .assert()
        .code(0);
    assert!(env.read("again/report.md").contains("(decided)"));

    // The shipped suite judges on one attempt: the same node fails.
    env.cmd()
        .args(["run", "--simulate", "l40s-pcie-4", "-q", "--out", "once"])
        .args(["--inject", TRANSIENT])
        .assert()
        .code(1);
    let ev = read_json(&env.path("once/evidence.json"));
    assert_eq!(p2p(&ev)["status"], "fail");
    assert!(p2p(&ev).get("remeasure").is_none());
    assert!(!env.read("once/report.md").contains("Re-measured"));
}

#[test]
fn a_persistent_miss_fails_after_every_attempt() {
    let env = Env::new();
    let s = suite(&env, "[checks.p2p_bandwidth]\nremeasure = 2\n");
    let ev = run(&env, &s, &["slow-gpu-pair:gpu=0,peer=1"], "out", 1);
    let c = p2p(&ev);
    assert_eq!(c["status"], "fail");
    assert!(
        c["summary"]
            .as_str()
            .unwrap()
            .starts_with("failed 3 of 3 attempts: GPU 0 -> GPU 1: peer read"),
        "{}",
        c["summary"]
    );
    assert_eq!(c["remeasure"]["earlier"].as_array().unwrap().len(), 2);
    assert!(env
        .read("out/report.md")
        .contains("up to 3 attempts; attempt 3 decided."));
}

#[test]
fn wrong_data_is_never_measured_again() {
    let env = Env::new();
    let s = suite(&env, "[checks.p2p_bandwidth]\nremeasure = 3\n");
    let ev = run(&env, &s, &["corrupt-copy:gpu=0,peer=1"], "out", 1);
    let c = p2p(&ev);
    assert_eq!(c["remeasure"]["decided_by"], 1);
    assert_eq!(c["remeasure"]["earlier"].as_array().unwrap().len(), 0);
    assert_eq!(
        c["remeasure"]["stopped"],
        "wrong data is never re-measured away"
    );
    assert!(env
        .read("out/report.md")
        .contains("Not measured again: wrong data is never re-measured away."));
}

#[test]
fn remeasure_beyond_five_is_invalid_input_at_its_key() {
    let env = Env::new();
    for (table, line) in [
        ("[checks.host_bandwidth]", 5),
        ("[checks.collective.all_reduce]", 5),
    ] {
        let s = suite(&env, &format!("{table}\nremeasure = 6\n"));
        env.cmd()
            .args(["run", "--simulate", "l40s-pcie-4", &s, "-q", "--out", "x"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "s.toml:{line}:1: {}.remeasure: remeasure must be 0 to 5 more attempts, got 6",
                table.trim_matches(['[', ']'])
            )));
    }
    // A key the check does not have is refused as before.
    let s = suite(&env, "[checks.topology]\nremeasure = 1\n");
    env.cmd()
        .args(["run", "--simulate", "l40s-pcie-4", &s, "-q", "--out", "x"])
        .assert()
        .code(2);
}

#[test]
fn attempts_is_refused_on_a_fault_that_is_not_slow() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "l40s-pcie-4", "-q"])
        .args(["--inject", "corrupt-copy:gpu=0,attempts=1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "attempts applies to the slow faults only",
        ));
}

#[test]
fn the_report_gives_device_copy_as_nvbandwidth_counts_it() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "out"])
        .assert()
        .code(0);
    let ev = read_json(&env.path("out/evidence.json"));
    let host = util::check_json(&ev, "host_bandwidth");
    let copy = host["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "device_copy")
        .unwrap();
    assert_eq!(copy["convention"]["bytes"], "read_plus_written");
    assert_eq!(copy["convention"]["compared_with"], "nvbandwidth");
    let half = copy["median"].as_f64().unwrap() / 2.0;
    let md = env.read("out/report.md");
    let line = md
        .lines()
        .find(|l| l.contains("| device-local copy |"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(
        line.contains("one direction, bytes read plus bytes written")
            && line.contains(&format!("{half:.0} GB/s as nvbandwidth counts it")),
        "{line}"
    );
    let both = md
        .lines()
        .find(|l| l.contains("| both directions at once |"))
        .unwrap();
    assert!(both.contains("sum of both directions"), "{both}");
    assert!(env
        .read("out/report.html")
        .contains("<h2 id=\"conventions\">How the bandwidth figures count</h2>"));
}

#[test]
fn a_format_1_certificate_renders_without_conventions_or_attempts() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/evidence-v1/cert");
    let env = Env::new();
    std::fs::create_dir_all(env.path("cert")).unwrap();
    std::fs::copy(
        fixture.join("evidence.json"),
        env.path("cert/evidence.json"),
    )
    .unwrap();
    env.cmd()
        .args(["render", "cert", "--out", "again"])
        .assert()
        .code(0);
    let md = env.read("again/report.md");
    assert!(!md.contains("How the bandwidth figures count"));
    assert!(!md.contains("Re-measured"));
}

#[test]
fn the_console_says_when_a_check_measures_again() {
    let env = Env::new();
    let s = suite(&env, "[checks.p2p_bandwidth]\nremeasure = 1\n");
    let out = env
        .cmd()
        .args(["run", "--simulate", "l40s-pcie-4", &s, "--out", "out"])
        .args(["--inject", TRANSIENT])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("measuring again"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.starts_with("[5/14] missed: GPU 0 -> GPU 1: peer read")
            && line.ends_with("; measuring again, attempt 2 of 2 [SIMULATED]"),
        "{line}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("passed on attempt 2 of 2, after 1 miss"),
        "{stdout}"
    );
    // Quiet: one line on stdout, nothing on stderr.
    env.cmd()
        .args(["run", "--simulate", "l40s-pcie-4", &s, "-q", "--out", "q"])
        .args(["--inject", TRANSIENT])
        .assert()
        .code(0)
        .stderr("");
}

/// An XID raised under load is told once: measuring the check again would not see it, so the
/// failure it makes stands at the attempt that saw it, and no later check names it again. (A
/// test of its own process: the XIDs are not read once a measurement's thread was abandoned,
/// which a library test elsewhere does on purpose.)
#[test]
fn an_xid_raised_under_load_is_never_measured_again() {
    let env = Env::new();
    let s = suite(&env, "[checks.host_bandwidth]\nremeasure = 3\n");
    let ev = run(&env, &s, &["xid-under-load:gpu=2"], "x", 1);
    assert_eq!(ev["verdict"], "fail");
    let checks = ev["checks"].as_array().unwrap();
    let hb = checks.iter().find(|c| c["id"] == "host_bandwidth").unwrap();
    assert_eq!(hb["status"], "fail");
    assert_eq!(hb["remeasure"]["decided_by"], 1);
    assert_eq!(
        hb["remeasure"]["stopped"],
        "an XID raised under load is never re-measured away"
    );
    assert!(hb["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["status"] == "fail"
            && f["reason"]
                == "GPU 2: XID 48 (nvml event) raised while this check ran, which fails a node"));
    assert_eq!(naming(checks, "raised while"), ["host_bandwidth"]);
    // Told once: the closing reading after the last check finds nothing more.
    assert!(!checks.iter().any(|c| c["id"] == "after-checks"));
}

/// Where no check reads the GPUs after the XID was raised or the error counted (here none runs
/// on them at all), the reading after the last check finds it: the run fails under a record of
/// its own, last, that says when; without the fault the same run passes with no such record.
#[test]
fn what_is_raised_after_the_last_reading_fails_the_run_under_a_record_of_its_own() {
    let env = Env::new();
    env.write(
        "s.toml",
        "format_version = 1\nname = \"late\"\nextends = \"base\"\n\
         [checks.topology]\nenabled = false\n",
    );
    let clean = run(&env, "s.toml", &[], "clean", 0);
    assert!(!clean["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == "after-checks"));

    let ev = run(
        &env,
        "s.toml",
        &["xid-under-load:gpu=1,code=79", "ecc-under-load:gpu=2"],
        "late",
        1,
    );
    assert_eq!(ev["verdict"], "fail");
    let checks = ev["checks"].as_array().unwrap();
    let last = checks.last().unwrap();
    assert_eq!(
        (&last["id"], &last["status"]),
        (&"after-checks".into(), &"fail".into())
    );
    let reasons: Vec<&str> = last["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| f["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(
            &"GPU 1: XID 79 (nvml event) raised since the last reading, before the run ended, \
              which fails a node"
        ),
        "{reasons:#?}"
    );
    assert!(
        reasons.contains(
            &"GPU 2: uncorrectable ECC errors rose by 1 since the last reading, before the run \
              ended, to 1, beyond the limit of 0"
        ),
        "{reasons:#?}"
    );
    // Only that record names them: the health check judged the start.
    assert_eq!(naming(checks, "XID 79"), ["after-checks"]);
    // The console says so after the last check, and the certificate shows it.
    let out = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "l40s-pcie-4",
            "s.toml",
            "--out",
            "shown",
        ])
        .args(["--inject", "xid-under-load:gpu=1,code=79"])
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(
        err.lines()
            .any(|l| l.starts_with("[end] XIDs, counters after the checks")
                && l.contains("FAIL")
                && l.contains("GPU 1: XID 79")
                && l.ends_with("[SIMULATED]")),
        "{err}"
    );
    assert!(env
        .read("shown/report.md")
        .contains("XIDs, counters after the checks"));

    // A counter that grew within its limit is shown, not judged: alone, no record (it would read
    // as a skipped check); beyond the limit, the run fails.
    let ev = run(
        &env,
        "s.toml",
        &["link-errors-under-load:gpu=3"],
        "beyond",
        1,
    );
    let last = ev["checks"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["id"], &last["status"]),
        (&"after-checks".into(), &"fail".into())
    );
    assert!(last["summary"].as_str().unwrap().starts_with(
        "GPU 3: PCIe replays rose by 200 since the last reading, before the run ended"
    ));
    env.write(
        "within.toml",
        "format_version = 1\nname = \"late\"\nextends = \"base\"\n\
         [checks.topology]\nenabled = false\n[checks.health]\nmax_pcie_replays = 1000\n",
    );
    let ev = run(
        &env,
        "within.toml",
        &["link-errors-under-load:gpu=3"],
        "within",
        0,
    );
    assert!(!ev["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == "after-checks"));
}

/// An error counted under load (an uncorrectable ECC error and the remap it leaves pending,
/// PCIe replays past the limit) fails the check it was counted in, on the attempt that counted
/// it, and is never measured again; no later check names it again, and a clean node names none.
#[test]
fn an_error_counted_under_load_fails_its_check_once_and_is_never_measured_again() {
    let env = Env::new();
    let s = suite(&env, "[checks.host_bandwidth]\nremeasure = 3\n");
    let named = |ev: &serde_json::Value| -> Vec<(String, String)> {
        ev["checks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| {
                c["findings"].as_array().unwrap().iter().filter_map(|f| {
                    let r = f["reason"].as_str().unwrap();
                    (r.contains("while this check ran") && !r.contains("XID"))
                        .then(|| (c["id"].as_str().unwrap().to_string(), r.to_string()))
                })
            })
            .collect()
    };
    let clean = run(&env, &s, &[], "clean", 0);
    assert!(named(&clean).is_empty(), "{:?}", named(&clean));
    for (fault, reasons) in [
        (
            "ecc-under-load:gpu=2",
            vec![
                "GPU 2: uncorrectable ECC errors rose by 1 while this check ran, to 1, beyond the \
                 limit of 0",
                "GPU 2: a row remap became pending (the GPU must be reset before use) while this \
                 check ran",
            ],
        ),
        (
            "link-errors-under-load:gpu=1",
            vec![
                "GPU 1: PCIe replays rose by 200 while this check ran, to 200, beyond the limit of 80",
            ],
        ),
    ] {
        let out = fault.split(':').next().unwrap();
        let ev = run(&env, &s, &[fault], out, 1);
        assert_eq!(ev["verdict"], "fail");
        let hb = util::check_json(&ev, "host_bandwidth");
        assert_eq!(hb["status"], "fail");
        assert_eq!(hb["remeasure"]["decided_by"], 1);
        assert_eq!(
            hb["remeasure"]["stopped"],
            "an error counted under load is never re-measured away"
        );
        let want: Vec<(String, String)> = reasons
            .iter()
            .map(|r| ("host_bandwidth".to_string(), r.to_string()))
            .collect();
        assert_eq!(named(&ev), want, "{fault}");
    }
}

/// On an NVSwitch node, NVLink errors counted under load are filed per link under the check
/// that counted them, beside the PCIe replays.
#[test]
fn nvlink_errors_counted_under_load_name_their_link() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "h100-sxm-8", "-q", "--out", "o"])
        .args(["--inject", "link-errors-under-load:gpu=3"])
        .assert()
        .code(1);
    let ev = read_json(&env.path("o/evidence.json"));
    let hb = util::check_json(&ev, "host_bandwidth");
    let under: Vec<(&str, &str, &str)> = hb["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["reason"]
                .as_str()
                .unwrap()
                .contains("while this check ran")
        })
        .map(|f| {
            (
                f["status"].as_str().unwrap(),
                f["metric"].as_str().unwrap(),
                f["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        under,
        [
            (
                "fail",
                "pcie_replays",
                "GPU 3: PCIe replays rose by 200 while this check ran, to 200, beyond the limit \
                 of 80"
            ),
            (
                "fail",
                "nvlink_errors",
                "GPU 3 link 0: NVLink errors (replay, recovery, CRC) rose by 500 while this check \
                 ran, to 500, beyond the limit of 100"
            ),
        ]
    );
}

/// An NVLink that goes down under load fails the check it went down in, naming the link, and
/// only that one: the later checks compare the links still up.
#[test]
fn an_nvlink_that_goes_down_under_load_fails_that_check_once() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "h100-sxm-8", "-q", "--out", "o"])
        .args(["--inject", "nvlink-down-under-load:gpu=2"])
        .assert()
        .code(1);
    let ev = read_json(&env.path("o/evidence.json"));
    let down: Vec<(String, String)> = ev["checks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["findings"].as_array().unwrap().iter().filter_map(|f| {
                let reason = f["reason"].as_str().unwrap();
                (reason.contains("link 0") && f["subject"]["gpu"] == 2)
                    .then(|| (c["id"].as_str().unwrap().to_string(), reason.to_string()))
            })
        })
        .collect();
    assert_eq!(
        down,
        [(
            "host_bandwidth".to_string(),
            "GPU 2 link 0: NVLink went down while this check ran (it was active when last read)"
                .to_string()
        )]
    );
}
