//! The command line as users run it: exit codes, files written, messages.

mod util;
use predicates::prelude::*;
use util::{read_json, Env};

const NODES: [&str; 5] = [
    "h100-sxm-8",
    "h200-sxm-8",
    "a100-sxm-80gb-8",
    "l40s-pcie-4",
    "h200-vm-1",
];

#[test]
fn every_shipped_node_passes_its_suite_and_is_labelled_simulated() {
    let env = Env::new();
    for node in NODES {
        let out = format!("out-{node}");
        env.cmd()
            .args(["run", "--simulate", node, "--out", &out])
            .assert()
            .code(0)
            .stdout(predicate::str::contains("SIMULATED"));
        let ev = read_json(&env.path(&format!("{out}/evidence.json")));
        assert_eq!(ev["simulated"], true, "{node}");
        assert_eq!(ev["state"], "complete", "{node}");
        assert_eq!(ev["suite"]["name"], node, "{node}");
        // A node of several GPUs trains partitioned too, which needs version 5.
        let partitioned = ev["node"]["gpus"].as_array().unwrap().len() > 1;
        assert_eq!(
            ev["format_version"],
            if partitioned {
                nodecert::evidence::METHOD_FORMAT_VERSION
            } else {
                nodecert::evidence::BASE_FORMAT_VERSION
            },
            "{node}"
        );
        assert_eq!(ev["suite"]["sha256"].as_str().map(str::len), Some(64));
        let html = env.read(&format!("{out}/report.html"));
        let md = env.read(&format!("{out}/report.md"));
        assert!(
            html.contains("SIMULATED RESULTS"),
            "{node}: html not labelled"
        );
        assert!(
            md.contains("SIMULATED RESULTS"),
            "{node}: markdown not labelled"
        );
        assert!(html.contains("PASS (SIMULATED)"), "{node}");
        assert!(
            !html.contains("src=\"http") && !html.contains("href=\"http"),
            "html must be self-contained"
        );
    }
}

#[test]
fn default_out_dir_and_suite_by_node() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "l40s-pcie-4", "-q"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("PASS: l40s-pcie-4"));
    assert!(env.path("nodecert-report/evidence.json").exists());
    assert!(env.path("nodecert-report/report.html").exists());
    assert!(env.path("nodecert-report/report.md").exists());
}

#[test]
fn same_seed_same_numbers_other_seed_other_numbers() {
    let env = Env::new();
    for (out, seed) in [("a", "5"), ("b", "5"), ("c", "6")] {
        env.cmd()
            .args([
                "run",
                "--simulate",
                "h200-vm-1",
                "-q",
                "--seed",
                seed,
                "--out",
                out,
            ])
            .assert()
            .code(0);
    }
    let metrics = |d: &str| {
        read_json(&env.path(&format!("{d}/evidence.json")))["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["metrics"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(metrics("a"), metrics("b"));
    assert_ne!(metrics("a"), metrics("c"));
}

/// (fault, node, the check that must fail, words the reason must contain)
const FAULTS: &[(&str, &str, &str, &str)] = &[
    (
        "gpu-missing:gpu=3",
        "h100-sxm-8",
        "topology",
        "1 of 8 GPUs missing",
    ),
    (
        "gpu-lost:gpu=6",
        "h100-sxm-8",
        "health",
        "NVML GPU 6 fell off the bus",
    ),
    ("nvlink-down:gpu=2", "h100-sxm-8", "topology", "GPU 2 link"),
    (
        "pcie-downtrained:gpu=5",
        "h100-sxm-8",
        "topology",
        "GPU 5 PCIe link trained at Gen5 x8",
    ),
    (
        "pcie-downtrained:gpu=1,gen=3",
        "a100-sxm-80gb-8",
        "host_bandwidth",
        "GPU 1",
    ),
    (
        "p2p-disabled",
        "h200-sxm-8",
        "virtualization",
        "peer access not available between GPU 0 and GPU 1",
    ),
    (
        "p2p-disabled:gpu=2,peer=3",
        "l40s-pcie-4",
        "p2p_bandwidth",
        "peer access disabled between GPU 2 and GPU 3",
    ),
    (
        "slow-host-bandwidth:gpu=6",
        "h100-sxm-8",
        "host_bandwidth",
        "GPU 6",
    ),
    (
        "slow-gpu-pair:gpu=1,peer=4",
        "h200-sxm-8",
        "p2p_bandwidth",
        "GPU 1 -> GPU 4",
    ),
    (
        "slow-collective",
        "h100-sxm-8",
        "collective.all_reduce",
        "all_reduce 8 GiB",
    ),
    (
        "slow-collective:op=all_gather",
        "a100-sxm-80gb-8",
        "collective.all_gather",
        "all_gather 8 GiB",
    ),
    (
        "slow-collective",
        "l40s-pcie-4",
        "collective.all_reduce",
        "slowest peer path",
    ),
    (
        "ecc-uncorrectable:gpu=4",
        "h100-sxm-8",
        "health",
        "GPU 4: 1 uncorrectable",
    ),
    (
        "row-remap-pending:gpu=0",
        "h200-vm-1",
        "health",
        "GPU 0: a row remap is pending",
    ),
    (
        "collective-corrupt",
        "h200-vm-1",
        "collective.all_reduce",
        "elements wrong",
    ),
    (
        "collective-corrupt:op=broadcast",
        "h100-sxm-8",
        "collective.broadcast",
        "elements wrong",
    ),
    ("replica-mismatch:gpu=5", "h100-sxm-8", "training", "GPU 5"),
    ("wrong-loss", "h200-vm-1", "training", "CPU golden"),
    (
        "xid:gpu=2,code=79",
        "l40s-pcie-4",
        "health",
        "GPU 2: XID 79",
    ),
    (
        "thermal-throttle:gpu=1",
        "h200-sxm-8",
        "health",
        "GPU 1: clocks held back by hw_thermal_slowdown",
    ),
    (
        "vbios-mismatch:gpu=6",
        "a100-sxm-80gb-8",
        "health",
        "92.00.36.00.03 on GPU 6",
    ),
    (
        "vgpu",
        "h200-vm-1",
        "virtualization",
        "vGPU where passthrough was promised",
    ),
    (
        "corrupt-copy:gpu=1,peer=3",
        "h100-sxm-8",
        "p2p_bandwidth",
        "GPU 1 -> GPU 3: peer read copy returned wrong data",
    ),
    (
        "corrupt-copy:gpu=0",
        "h200-vm-1",
        "host_bandwidth",
        "GPU 0: host-to-device copy returned wrong data",
    ),
];

#[test]
fn each_injected_fault_fails_the_right_check_with_exit_1() {
    let env = Env::new();
    for (i, (fault, node, check, words)) in FAULTS.iter().enumerate() {
        let out = format!("f{i}");
        env.cmd()
            .args([
                "run",
                "--simulate",
                node,
                "--inject",
                fault,
                "--out",
                &out,
                "-q",
            ])
            .assert()
            .code(1)
            .stdout(predicate::str::contains("FAIL"));
        let ev = read_json(&env.path(&format!("{out}/evidence.json")));
        let rec = ev["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == *check)
            .unwrap_or_else(|| panic!("{fault}: no check {check}"));
        assert_eq!(
            rec["status"], "fail",
            "{fault} on {node}: {check} did not fail: {}",
            rec["summary"]
        );
        let reasons: Vec<String> = rec["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["status"] == "fail")
            .map(|f| f["reason"].as_str().unwrap().to_string())
            .collect();
        assert!(
            reasons.iter().any(|r| r.contains(words)),
            "{fault} on {node}: no failing reason in {check} mentions '{words}': {reasons:#?}"
        );
        assert_eq!(ev["simulation"]["faults"][0], *fault);
        let html = env.read(&format!("{out}/report.html"));
        assert!(html.contains("FAIL (SIMULATED)"), "{fault}");
    }
}

/// A job that starts on a GPU once the run is under way (absent from the health check's start)
/// makes every later check that ran on the GPUs untestable, naming it, beside the slow figures
/// it causes: exit 3, never a slow GPU's exit 1.
#[test]
fn a_process_that_starts_during_the_run_makes_the_checks_after_it_untestable() {
    let env = Env::new();
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-sxm-8",
            "--inject",
            "process-starts:gpu=3",
        ])
        .args(["--out", "started"])
        .assert()
        .code(3);
    let ev = read_json(&env.path("started/evidence.json"));
    let by_id = |id: &str| util::check_json(&ev, id);
    assert_eq!(by_id("health")["status"], "pass");
    assert_eq!(by_id("topology")["status"], "pass");
    let compute = by_id("compute");
    assert_eq!(compute["status"], "error");
    let findings = compute["findings"].as_array().unwrap();
    let started: Vec<_> = findings
        .iter()
        .filter(|f| f["metric"] == "processes")
        .collect();
    assert_eq!(started.len(), 1, "{started:#?}");
    assert_eq!(started[0]["status"], "error");
    assert_eq!(started[0]["subject"], serde_json::json!({"gpu": 3}));
    assert!(started[0]["reason"]
        .as_str()
        .unwrap()
        .contains("pid 5151 (torchrun, 20 GiB)"));
    // The slow figures stay shown, against GPU 3.
    assert!(findings
        .iter()
        .any(|f| f["status"] == "fail" && f["subject"] == serde_json::json!({"gpu": 3})));
    for id in ["host_bandwidth", "training"] {
        assert_eq!(by_id(id)["status"], "error", "{id}");
    }
}

/// Another process on a GPU makes the run untestable (exit 3), naming the process, and the slow
/// figures it causes (GPU 3 keeps half its GEMM rate) are shown beside it, not passed off as
/// the GPU's own: the console and the report say why.
#[test]
fn a_gpu_another_process_holds_makes_the_run_untestable_naming_it() {
    let env = Env::new();
    let out = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h200-sxm-8",
            "--inject",
            "busy-gpu:gpu=3",
            "--out",
            "busy",
        ])
        .assert()
        .code(3);
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        stdout.contains("GPU 3 is in use by pid 4242 (python3, 30 GiB)"),
        "{stdout}"
    );
    let ev = read_json(&env.path("busy/evidence.json"));
    assert_eq!(ev["verdict"], "error");
    assert_eq!(
        ev["node"]["gpus"][3]["processes"],
        serde_json::json!([{"pid": 4242, "name": "python3", "memory_bytes": 30_u64 << 30}])
    );
    let check = |id: &str| util::check_json(&ev, id).clone();
    let health = check("health");
    assert_eq!(health["status"], "error");
    let errors: Vec<&serde_json::Value> = health["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0]["subject"]["gpu"], 3);
    // Its share of the GPU shows as the slow GPU of the node.
    let compute = check("compute");
    assert_eq!(compute["status"], "fail", "{}", compute["summary"]);
    assert!(
        compute["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["status"] == "fail")
            .all(|f| f["subject"]["gpu"] == 3),
        "{:#}",
        compute["findings"]
    );
    let md = env.read("busy/report.md");
    assert!(
        md.contains("GPU 3 is in use by pid 4242 (python3, 30 GiB)"),
        "{md}"
    );
}

#[test]
fn a_node_whose_every_gpu_is_lost_cannot_be_tested() {
    // As on real hardware: no GPU answers, so exit 3, and no hint to simulate what already is.
    let env = Env::new();
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--inject",
            "gpu-lost",
            "-q",
        ])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("fell off the bus"))
        .stderr(predicate::str::contains("hint").not());
}

#[test]
fn bad_fault_and_bad_flags_exit_2() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "h100-sxm-8", "--inject", "nvlink-gone"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown fault 'nvlink-gone'"));
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h100-sxm-8",
            "--inject",
            "slow-gpu-pair:gpu=9",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("gpu=9 is out of range"));
    env.cmd()
        .args(["run", "--simulate", "no-such-node"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no-such-node"));
    env.cmd().args(["run", "--bogus"]).assert().code(2);
    env.cmd().args(["run", "--inject", "xid"]).assert().code(2);
}

#[test]
fn help_documents_exit_codes() {
    let env = Env::new();
    env.cmd().arg("--help").assert().code(0).stdout(
        predicate::str::contains("Exit codes")
            .and(predicate::str::contains("3  the node could not be tested")),
    );
    env.cmd()
        .args(["run", "--help"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("2  invalid input"));
}

#[test]
fn list_shows_suites_nodes_and_faults() {
    let env = Env::new();
    let a = env.cmd().arg("list").assert().code(0);
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    for n in NODES {
        assert!(
            out.matches(n).count() >= 2,
            "{n} should appear as suite and node"
        );
    }
    for f in [
        "gpu-missing",
        "gpu-lost",
        "nvlink-down",
        "pcie-downtrained",
        "p2p-disabled",
        "slow-host-bandwidth",
        "slow-gpu-pair",
        "slow-collective",
        "ecc-uncorrectable",
        "row-remap-pending",
        "collective-corrupt",
        "corrupt-copy",
    ] {
        assert!(out.contains(f), "{f}");
    }
}

#[test]
fn check_prints_the_plan_without_running() {
    let env = Env::new();
    env.cmd()
        .args(["check", "h100-sxm-8", "--simulate", "h100-sxm-8"])
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("valid.")
                .and(predicate::str::contains("56 ordered pairs"))
                .and(predicate::str::contains("31 sizes from 8 B to 8 GiB")),
        );
    env.cmd()
        .args(["check", "h200-vm-1"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("will be skipped: no peer pairs"));
    assert!(
        !env.path("nodecert-report").exists(),
        "check must not run anything"
    );
}

/// A suite that cannot run as stated on the node is refused by `check` as `run` refuses it
/// (exit 2, at its key), and is never called valid first.
#[test]
fn check_never_calls_valid_a_suite_that_cannot_run_on_the_node() {
    let env = Env::new();
    let suite = env.write(
        "tiny.toml",
        "format_version = 1\nname = \"tiny\"\n\
         [checks.collective.all_to_all]\nmin_size = \"8B\"\nmax_size = \"64B\"\n",
    );
    let a = env
        .cmd()
        .args([
            "check",
            &suite.display().to_string(),
            "--simulate",
            "h100-sxm-8",
        ])
        .assert()
        .code(2);
    let text = util::out_text(&a);
    assert!(text.contains("raise max_size to at least 128 B"), "{text}");
    assert!(!text.lines().any(|l| l == "valid."), "{text}");
    // On one GPU the same suite moves data: valid.
    let a = env
        .cmd()
        .args([
            "check",
            &suite.display().to_string(),
            "--simulate",
            "h200-vm-1",
        ])
        .assert()
        .code(0);
    assert!(util::out_text(&a).lines().any(|l| l == "valid."));
}

/// A floor of 0 loads but judges nothing: `check` and `run` name it at its line, a simulated
/// run's line says simulated, and the figure it bounds is not counted as a judgement.
#[test]
fn a_floor_of_zero_is_named_and_not_counted() {
    let env = Env::new();
    let suite = env.write(
        "zero.toml",
        "format_version = 1\nextends = \"h200-vm-1\"\nname = \"zero\"\n\
         [checks.host_bandwidth.h2d]\nfail_below = 0\nwarn_below = 0\n\
         [node]\nmemory_gib_min = 0\n",
    );
    let caution = "zero.toml:5:1: checks.host_bandwidth.h2d.fail_below: a floor of 0 cannot fail";
    let a = env
        .cmd()
        .args(["check", &suite.display().to_string()])
        .assert()
        .code(0);
    let out = util::out_text(&a);
    assert!(
        out.lines()
            .any(|l| l.starts_with("caution: ") && l.contains(caution)),
        "{out}"
    );
    assert!(out.contains("checks.host_bandwidth.h2d.warn_below: a floor of 0"));
    assert!(
        out.contains("zero.toml:8:1: node.memory_gib_min: a floor of 0"),
        "{out}"
    );
    // Said with -q too.
    let a = env
        .cmd()
        .args([
            "run",
            &suite.display().to_string(),
            "--simulate",
            "h200-vm-1",
            "-q",
        ])
        .args(["--out", &env.path("r").display().to_string()])
        .assert()
        .code(0);
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        err.lines().any(|l| l.starts_with("caution: ")
            && l.contains(caution)
            && l.ends_with("[SIMULATED]")),
        "{err}"
    );
    assert_eq!(err.lines().filter(|l| l.starts_with("caution:")).count(), 3);
    let ev = util::read_json(&env.path("r/evidence.json"));
    let host = util::check_json(&ev, "host_bandwidth");
    let judged_h2d = host["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["metric"] == "h2d" && f["info"] != true);
    assert_eq!(judged_h2d.count(), 0, "{host}");
    // Nor is memory held to 0 GiB.
    let topology = util::check_json(&ev, "topology");
    assert!(
        !topology.to_string().contains("GiB of memory"),
        "{topology}"
    );
}

#[test]
fn inventory_of_a_simulated_node() {
    let env = Env::new();
    env.cmd()
        .args(["inventory", "--simulate", "h100-sxm-8"])
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("SIMULATED")
                .and(predicate::str::contains("NV18"))
                .and(predicate::str::contains("8x NVIDIA H100")),
        );
    let a = env
        .cmd()
        .args(["inventory", "--simulate", "l40s-pcie-4", "--json"])
        .assert()
        .code(0);
    let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert_eq!(v["simulated"], true);
    assert_eq!(v["inventory"]["gpus"].as_array().unwrap().len(), 4);
}

#[test]
fn render_again_from_evidence_and_with_custom_templates() {
    let env = Env::new();
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "r"])
        .assert()
        .code(0);
    let before = env.read("r/report.md");
    std::fs::remove_file(env.path("r/report.md")).unwrap();
    env.cmd()
        .args(["render", "r/evidence.json"])
        .assert()
        .code(0);
    assert_eq!(
        env.read("r/report.md"),
        before,
        "rendering is a pure function of the evidence"
    );
    env.write(
        "tpl/report.md.j2",
        "custom {{ ev.suite.name }} {{ v.verdict }}\n",
    );
    env.cmd()
        .args(["render", "r", "--out", "r2", "--templates", "tpl"])
        .assert()
        .code(0);
    assert_eq!(
        env.read("r2/report.md"),
        "custom h200-vm-1 PASS (SIMULATED)\n"
    );
    // The HTML template was not overridden: the embedded one is used.
    assert!(env.read("r2/report.html").contains("SIMULATED RESULTS"));
    // The same folder for a run: templates are tried before the run, with the embedded one too.
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--templates", "tpl", "-q"])
        .args(["--out", "r3"])
        .assert()
        .code(0);
    assert_eq!(
        env.read("r3/report.md"),
        "custom h200-vm-1 PASS (SIMULATED)\n"
    );
    assert!(env.read("r3/report.html").contains("SIMULATED RESULTS"));
    // A page that leaves out that the run is simulated is refused, not written.
    env.write(
        "quiet/report.md.j2",
        "certificate of {{ ev.node.hostname }}: {{ ev.verdict }}\n",
    );
    env.cmd()
        .args(["render", "r", "--out", "r4", "--templates", "quiet"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "report.md.j2: the page never says SIMULATED",
        ));
    assert!(!env.path("r4/report.md").exists());
    env.write("bad/report.html.j2", "{% for x in %}\n");
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--templates", "bad", "-q"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("report.html.j2:1:"));
}

#[test]
fn render_rejects_what_is_not_evidence() {
    let env = Env::new();
    env.write("x.json", "{\"hello\": 1}");
    env.cmd()
        .args(["render", "x.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a nodecert evidence file"));
    env.write(
        "y.json",
        "{\"format\": \"nodecert-evidence\", \"format_version\": 99}",
    );
    env.cmd()
        .args(["render", "y.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("newer than this nodecert reads"));
    env.write("z.json", "{ nope");
    env.cmd()
        .args(["render", "z.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("z.json:1:3"));
    // Valid JSON, a value of the wrong type: located too.
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "r"])
        .assert()
        .code(0);
    let text = env.read("r/evidence.json");
    let line = 1 + text
        .lines()
        .position(|l| l.contains("\"median\": "))
        .expect("a median");
    let broken: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| match i + 1 == line {
            true => format!("{}\"fast\",", &l[..l.find(": ").unwrap() + 2]),
            false => l.to_string(),
        })
        .collect();
    env.write("w/evidence.json", &broken.join("\n"));
    env.cmd()
        .args(["render", "w", "--out", "w2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("w/evidence.json:{line}:")))
        .stderr(predicate::str::contains(
            "invalid evidence: invalid type: string \"fast\"",
        ));
}

#[test]
fn html_is_escaped() {
    let env = Env::new();
    env.write(
        "s.toml",
        "format_version = 1\nname = \"x<script>alert(1)</script>\"\nextends = \"h200-vm-1\"\n",
    );
    env.cmd()
        .args([
            "run",
            "s.toml",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--out",
            "o",
        ])
        .assert()
        .code(0);
    let html = env.read("o/report.html");
    assert!(!html.contains("<script>alert(1)"));
    assert!(html.contains("&lt;script&gt;"));
}

/// The text of an embedded simulated node, to extend with faults.
fn embedded_node(name: &str) -> &'static str {
    nodecert::backend::sim::EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no embedded node {name}"))
        .1
}

#[test]
fn a_node_with_a_lost_gpu_is_not_frozen() {
    let env = Env::new();
    let base = embedded_node("h100-sxm-8");
    env.write(
        "node.toml",
        &format!("{base}\n[[faults]]\nkind = \"gpu-lost\"\ngpu = 3\n"),
    );
    env.cmd()
        .args([
            "inventory",
            "--simulate",
            "node.toml",
            "--as-suite",
            "f.toml",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "not freezing this node: NVML GPU 3 fell off the bus",
        ));
    assert!(!env.path("f.toml").exists());
    // The plain inventory still lists it.
    env.cmd()
        .args(["inventory", "--simulate", "node.toml"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "NVML GPU 3: nvmlDeviceGetHandleByIndex(3) failed",
        ));
}

#[test]
fn a_node_file_can_carry_faults_and_is_validated_like_a_suite() {
    let env = Env::new();
    let base = embedded_node("l40s-pcie-4");
    env.write(
        "node.toml",
        &format!("{base}\n[[faults]]\nkind = \"ecc-uncorrectable\"\ngpu = 1\n"),
    );
    env.cmd()
        .args([
            "run",
            "l40s-pcie-4",
            "--simulate",
            "node.toml",
            "-q",
            "--out",
            "o",
        ])
        .assert()
        .code(1);
    let ev = read_json(&env.path("o/evidence.json"));
    assert_eq!(ev["simulation"]["faults"][0], "ecc-uncorrectable:gpu=1");
    env.write(
        "bad.toml",
        &format!("{base}\n[[faults]]\nkind = \"ecc-uncorrectable\"\ngpu = 7\n"),
    );
    env.cmd()
        .args(["inventory", "--simulate", "bad.toml"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("bad.toml:")
                .and(predicate::str::contains("gpu=7 is out of range")),
        );
    env.write("typo.toml", &base.replace("noise_pct", "noise_pc"));
    env.cmd()
        .args(["inventory", "--simulate", "typo.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown field `noise_pc`"));
}

#[test]
fn the_bf16_training_suite_runs_end_to_end_on_the_simulated_h200() {
    // The anchor in bf16 mixed precision: what ci/gpu-smoke.sh runs on the lent GPU.
    let env = Env::new();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/suites");
    for (suite, out) in [
        ("training-anchor-bf16.toml", "bf16"),
        ("training-anchor.toml", "fp32"),
    ] {
        env.cmd()
            .args(["run", &format!("{dir}/{suite}"), "--simulate", "h200-vm-1"])
            .args(["--out", out])
            .assert()
            .code(0);
    }
    let check = |out: &str| {
        let ev = read_json(&env.path(&format!("{out}/evidence.json")));
        let checks = ev["checks"].as_array().unwrap().clone();
        assert_eq!(checks.len(), 1);
        checks[0].clone()
    };
    let fact = |c: &serde_json::Value, name: &str| {
        c["facts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no fact {name}"))["value"]
            .clone()
    };
    let median = |c: &serde_json::Value, name: &str| {
        c["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()["median"]
            .as_f64()
            .unwrap()
    };
    let (bf16, fp32) = (check("bf16"), check("fp32"));
    assert_eq!(bf16["status"], "pass", "{bf16}");
    // The evidence says which precision ran, and that the golden check stayed fp32.
    let text = |t: &str| serde_json::json!({ "text": t });
    assert_eq!(fact(&bf16, "precision"), text("bf16"));
    assert_eq!(fact(&bf16, "golden_precision"), text("fp32"));
    assert_eq!(fact(&fp32, "precision"), text("fp32"));
    // The same model, as the suite extends the anchor's.
    assert_eq!(fact(&bf16, "gradient_bytes"), fact(&fp32, "gradient_bytes"));
    // Half the measured bf16 GEMM rate: ~2.6 ms a step against fp32's ~20 ms.
    let (b, f) = (median(&bf16, "step_time"), median(&fp32, "step_time"));
    assert!((2.3..3.0).contains(&b), "bf16 step {b} ms");
    assert!(f / b > 6.0 && f / b < 9.0, "fp32 {f} ms, bf16 {b} ms");
}

#[test]
fn the_training_anchor_suite_runs_its_one_check() {
    // ci/gpu-smoke.sh runs this file on the lent GPU; here on the simulated H200 VM.
    let env = Env::new();
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/suites/training-anchor.toml");
    env.cmd()
        .args(["run", suite, "--simulate", "h200-vm-1", "--out", "anchor"])
        .assert()
        .code(0);
    let ev = read_json(&env.path("anchor/evidence.json"));
    let checks = ev["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0]["id"], "training");
    let metrics = checks[0]["metrics"].as_array().unwrap();
    let step = metrics.iter().find(|m| m["name"] == "step_time").unwrap();
    assert_eq!(step["subject"], serde_json::json!({}));
    assert!(step["median"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_reader_that_stops_early_is_no_panic() {
    // `nodecert inventory --json | head`: far more than a pipe holds, so nodecert is still
    // writing when the reader goes away.
    let env = Env::new();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("nodecert"))
        .args(["inventory", "--simulate", "h100-sxm-8", "--json"])
        .current_dir(env.path(""))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nodecert starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("nodecert ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

/// With no suite named, a node that lost a GPU is held to the suite of the GPUs it had, so the
/// loss fails it (a Slurm health check drains it) instead of turning it away as invalid input;
/// a node of other GPUs is turned away with the way out.
#[test]
fn a_node_that_lost_a_gpu_is_held_to_its_suite_and_fails() {
    let env = Env::new();
    let node = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/nodes/h100-sxm-8.toml"),
    )
    .unwrap()
    .replace("name = \"h100-sxm-8\"", "name = \"my-hgx\"");
    env.write("my-hgx.toml", &node);
    for fault in ["gpu-lost:gpu=3", "gpu-missing:gpu=3"] {
        env.cmd()
            .args([
                "run",
                "--simulate",
                "my-hgx.toml",
                "-q",
                "--out",
                "r",
                "--force",
            ])
            .args(["--inject", fault])
            .assert()
            .code(1)
            .stdout(predicate::str::contains("FAIL: h100-sxm-8"));
    }
    env.cmd()
        .args([
            "health-check",
            "--simulate",
            "my-hgx.toml",
            "--allow-simulated",
        ])
        .args(["--inject", "gpu-lost:gpu=3", "--mode", "slurm-prolog"])
        .assert()
        .code(1);
    env.write(
        "pcie.toml",
        &node.replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
    );
    env.cmd()
        .args(["run", "--simulate", "pcie.toml", "-q", "--out", "p"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "no embedded suite matches this node",
        ))
        .stderr(predicate::str::contains("inventory --as-suite"));
}

/// Settings made for training jobs in the shell nodecert runs from would change what it
/// measures: it runs without them, says so even with -q, and the evidence and both pages name
/// them with their values.
#[test]
fn settings_that_would_change_the_figures_are_set_aside_and_named() {
    let env = Env::new();
    let a = env
        .cmd()
        .env("NVIDIA_TF32_OVERRIDE", "0")
        .env("CUDA_DEVICE_MAX_CONNECTIONS", "1")
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "r"])
        .assert()
        .code(0);
    let stderr = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        stderr.contains("note: set aside for this run, as it would change what is measured: NVIDIA_TF32_OVERRIDE=0: forces TF32"),
        "{stderr}"
    );
    assert!(stderr.contains("CUDA_DEVICE_MAX_CONNECTIONS=1"), "{stderr}");
    let ev = read_json(&env.path("r/evidence.json"));
    assert_eq!(
        ev["environment"]["cuda_env_set_aside"],
        serde_json::json!([
            {"name": "NVIDIA_TF32_OVERRIDE", "value": "0"},
            {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"}
        ])
    );
    assert!(env.read("r/report.md").contains("`NVIDIA_TF32_OVERRIDE=0`"));
    assert!(env
        .read("r/report.html")
        .contains("<code>CUDA_DEVICE_MAX_CONNECTIONS=1</code>"));
    // Without them: nothing said, nothing recorded.
    let a = env
        .cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "s"])
        .assert()
        .code(0);
    assert!(!String::from_utf8_lossy(&a.get_output().stderr).contains("set aside"));
    assert!(read_json(&env.path("s/evidence.json"))["environment"]
        .get("cuda_env_set_aside")
        .is_none());
}
