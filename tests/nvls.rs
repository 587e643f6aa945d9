//! NVLink SHARP known, not guessed (issue 14 item 3), through the binary on the simulated
//! H100: a suite that requires NVLS fails naming the cause when the fabric manager is down, a
//! suite that takes it if available judges the ring by its own floor, and a suite that says
//! nothing about NVLS keeps its meaning. A node that can use NVLS is measured both ways (NCCL's
//! choice and NVLS forced off), `nvls = "off"` judges the forced-off figure, the report shows
//! both or says why there is no NVLS figure, and the child process that measures without NVLS
//! answers through the binary.

mod util;
use util::{read_json, Env};

/// A suite with only all_reduce at 1-8 GiB, `extra` added to its table.
fn suite(env: &Env, extra: &str) -> String {
    env.write(
        "s.toml",
        &format!(
            "format_version = 1\nname = \"nvls\"\n\n[checks.collective.all_reduce]\n\
             min_size = \"1GiB\"\nmax_size = \"8GiB\"\nmin_busbw_gbps = {{ \"8GiB\" = 460.0 }}\n{extra}"
        ),
    );
    "s.toml".into()
}

/// Run the suite on the simulated H100 with `faults`; the exit code and all_reduce's findings
/// as (status, reason, informational).
fn run(env: &Env, faults: &[&str]) -> (i32, Vec<(String, String, bool)>) {
    let _ = std::fs::remove_dir_all(env.path("out"));
    let mut c = env.cmd();
    c.args([
        "run",
        "--simulate",
        "h100-sxm-8",
        "s.toml",
        "-q",
        "--out",
        "out",
    ]);
    for f in faults {
        c.args(["--inject", f]);
    }
    let out = c.output().expect("runs");
    let code = out.status.code().expect("exit code");
    let ev = read_json(&env.path("out/evidence.json"));
    let check = ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == "collective.all_reduce")
        .expect("all_reduce")
        .clone();
    let findings = check["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["status"].as_str().unwrap_or("").to_string(),
                f["reason"].as_str().unwrap_or("").to_string(),
                f["info"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    (code, findings)
}

fn fails(f: &[(String, String, bool)]) -> Vec<&str> {
    f.iter()
        .filter(|x| x.0 == "fail")
        .map(|x| x.1.as_str())
        .collect()
}

#[test]
fn required_nvls_missing_fails_naming_the_cause_not_bus_bandwidth() {
    let env = Env::new();
    suite(&env, "nvls = \"required\"\n");
    let (code, f) = run(&env, &[]);
    assert_eq!((code, fails(&f)), (0, vec![]), "{f:#?}");
    let (code, f) = run(&env, &["nvls-unavailable"]);
    assert_eq!(code, 1, "{f:#?}");
    assert_eq!(
        fails(&f),
        vec!["NVLS not available: GPU 0: fabric manager not running"]
    );
    // One GPU the fabric manager did not register is enough, and it is the one named.
    let (code, f) = run(&env, &["nvls-unavailable:gpu=6"]);
    assert_eq!(code, 1);
    assert_eq!(
        fails(&f),
        vec!["NVLS not available: GPU 6: fabric manager not running"]
    );
}

#[test]
fn if_available_judges_the_ring_by_its_own_floor() {
    let env = Env::new();
    // 0.9 x the 368 GB/s a healthy Hopper node measures without NVLS.
    suite(
        &env,
        "nvls = \"if_available\"\nmin_busbw_gbps_no_nvls = { \"8GiB\" = 331.0 }\n",
    );
    let (code, f) = run(&env, &["nvls-unavailable"]);
    assert_eq!((code, fails(&f)), (0, vec![]), "{f:#?}");
    assert!(
        f.iter().any(|x| x.2
            && x.1
                .starts_with("NVLS not available (GPU 0: fabric manager not running)")),
        "{f:#?}"
    );
    assert!(f.iter().any(|x| x.0 == "pass" && !x.2), "judged: {f:#?}");
    // A ring that is slow for a ring still fails, on the ring's floor.
    let (code, f) = run(
        &env,
        &[
            "nvls-unavailable",
            "slow-collective:op=all_reduce,factor=0.8",
        ],
    );
    assert_eq!(code, 1, "{f:#?}");
    assert!(fails(&f)[0].contains("331"), "{f:#?}");
    // With NVLS the NVLS floor applies: 0.9 x 480 passes the ring floor but not 460.
    let (code, f) = run(&env, &["slow-collective:op=all_reduce,factor=0.9"]);
    assert_eq!(code, 1, "{f:#?}");
    assert!(fails(&f)[0].contains("460"), "{f:#?}");
}

#[test]
fn a_suite_that_says_nothing_of_nvls_keeps_its_meaning() {
    let env = Env::new();
    suite(&env, "");
    let (code, f) = run(&env, &[]);
    assert_eq!((code, fails(&f)), (0, vec![]), "{f:#?}");
    // The floor applies to whatever NCCL chose: the ring's 368 misses 460.
    let (code, f) = run(&env, &["nvls-unavailable"]);
    assert_eq!(code, 1);
    let fails = fails(&f);
    assert_eq!(fails.len(), 1, "{f:#?}");
    assert!(fails[0].contains("bus bandwidth"), "{f:#?}");
    assert!(!f.iter().any(|x| x.1.contains("NVLS")), "{f:#?}");
}

#[test]
fn nvls_keys_are_checked_where_they_stand() {
    let env = Env::new();
    for (extra, at) in [
        (
            "\n[checks.collective.all_gather]\nnvls = \"required\"\n",
            "checks.collective.all_gather.nvls",
        ),
        (
            "min_busbw_gbps_no_nvls = { \"8GiB\" = 331.0 }\n",
            "checks.collective.all_reduce.min_busbw_gbps_no_nvls",
        ),
        ("nvls = \"sometimes\"\n", "nvls"),
    ] {
        suite(&env, extra);
        let out = env.cmd().args(["check", "s.toml"]).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra}: {err}");
        assert!(err.contains(at), "{extra}: {err}");
    }
}

/// The all_reduce check of the run in `out`.
fn all_reduce(env: &Env) -> serde_json::Value {
    let ev = read_json(&env.path("out/evidence.json"));
    ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == "collective.all_reduce")
        .expect("all_reduce")
        .clone()
}

/// The median of metric `name` at 8 GiB, if measured.
fn at_8gib(check: &serde_json::Value, name: &str) -> Option<f64> {
    check["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name && m["subject"]["bytes"] == 8u64 << 30)
        .and_then(|m| m["median"].as_f64())
}

#[test]
fn an_nvls_node_measures_both_figures_and_the_report_shows_them() {
    let env = Env::new();
    suite(&env, "nvls = \"required\"\n");
    let (code, f) = run(&env, &[]);
    assert_eq!(code, 0, "{f:#?}");
    let c = all_reduce(&env);
    let on = at_8gib(&c, "busbw").expect("NCCL's figure");
    let off = at_8gib(&c, "busbw_no_nvls").expect("the figure without NVLS");
    // The simulated H100: about 480 with NVLS, 368 with the ring (nccl-tests#309).
    assert!((440.0..520.0).contains(&on), "{on}");
    assert!((340.0..400.0).contains(&off), "{off}");
    for name in ["time_no_nvls", "algbw_no_nvls", "busbw_no_nvls"] {
        let n = c["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == name)
            .count();
        assert_eq!(n, 4, "{name} at 1, 2, 4 and 8 GiB");
    }
    let conv = c["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "busbw_no_nvls")
        .map(|m| m["convention"].clone())
        .unwrap();
    assert_eq!(conv["bytes"], "bus_factor", "{conv}");
    let checked = c["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == "wrong_elements_no_nvls")
        .count();
    assert_eq!(checked, 4, "the data of the second pass is checked too");
    assert!(
        f.iter()
            .any(|x| x.0 == "pass" && x.1.contains("with NVLS forced off: data correct")),
        "data of the second pass judged: {f:#?}"
    );
    // Required: the figure without NVLS is information, not a judgement.
    let info: Vec<&String> = f
        .iter()
        .filter(|x| x.2 && x.1.contains("with NVLS forced off, "))
        .map(|x| &x.1)
        .collect();
    assert_eq!(info.len(), 1, "{f:#?}");
    assert!(info[0].contains("NVLS adds"), "{info:?}");
    let md = env.read("out/report.md");
    assert!(md.contains("busbw GB/s, NVLS off"), "{md}");
    assert!(md.contains("with NVLS forced off"), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| 8 GiB |"))
        .expect("8 GiB row");
    assert_eq!(
        row.matches('|').count(),
        7,
        "both figures in the row: {row}"
    );
    let html = env.read("out/report.html");
    assert!(html.contains("<th>busbw GB/s, NVLS off</th>"), "table");
    assert!(
        html.contains("all_reduce busbw, NVLS forced off"),
        "the chart's second line"
    );
}

#[test]
fn the_plan_says_when_all_reduce_is_measured_twice() {
    let env = Env::new();
    suite(&env, "nvls = \"off\"\n");
    let plan = |node: &str| {
        let out = env
            .cmd()
            .args(["check", "s.toml", "--simulate", node])
            .output()
            .expect("runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let h100 = plan("h100-sxm-8");
    assert!(
        h100.contains("with NVLS forced off (NCCL_NVLS_ENABLE=0, a child process on real GPUs): the floors apply to that figure"),
        "{h100}"
    );
    let a100 = plan("a100-sxm-80gb-8");
    assert!(!a100.contains("forced off"), "{a100}");
}

#[test]
fn without_nvls_there_is_no_second_pass_and_the_report_says_why() {
    let env = Env::new();
    suite(&env, "");
    let _ = run(&env, &["nvls-unavailable"]);
    let c = all_reduce(&env);
    assert!(at_8gib(&c, "busbw").is_some());
    assert_eq!(at_8gib(&c, "busbw_no_nvls"), None, "no second pass");
    let md = env.read("out/report.md");
    assert!(
        md.contains(
            "No NVLS figure: NVLS not available (GPU 0: fabric manager not running); \
             NCCL's figure is without NVLS."
        ),
        "{md}"
    );
    assert!(!md.contains("NVLS off |"), "{md}");
}

#[test]
fn off_judges_the_figure_with_nvls_forced_off() {
    let env = Env::new();
    // The 460 floor on the figure without NVLS: NCCL's 480 would pass, the ring's 368 fails.
    suite(&env, "nvls = \"off\"\n");
    let (code, f) = run(&env, &[]);
    assert_eq!(code, 1, "{f:#?}");
    let failed = fails(&f);
    assert_eq!(failed.len(), 1, "{f:#?}");
    assert!(
        failed[0].starts_with("all_reduce 8 GiB: bus bandwidth with NVLS forced off 3"),
        "{f:#?}"
    );
    let c = all_reduce(&env);
    let judged: Vec<&str> = c["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["status"] == "fail")
        .filter_map(|x| x["metric"].as_str())
        .collect();
    assert_eq!(judged, ["busbw_no_nvls"]);
    // A floor the ring reaches passes; a ring made slow fails, though NVLS would hide it.
    env.write(
        "s.toml",
        "format_version = 1\nname = \"nvls\"\n\n[checks.collective.all_reduce]\n\
         min_size = \"1GiB\"\nmax_size = \"8GiB\"\nmin_busbw_gbps = { \"8GiB\" = 331.0 }\n\
         nvls = \"off\"\n",
    );
    let (code, f) = run(&env, &[]);
    assert_eq!((code, fails(&f)), (0, vec![]), "{f:#?}");
    let (code, f) = run(&env, &["slow-collective:op=all_reduce,factor=0.8"]);
    assert_eq!(code, 1, "{f:#?}");
    assert!(fails(&f)[0].contains("331"), "{f:#?}");
    // Where NVLS is not available, NCCL's figure is the one without it: judged, and said so.
    let (code, f) = run(&env, &["nvls-unavailable"]);
    assert_eq!((code, fails(&f)), (0, vec![]), "{f:#?}");
    assert!(
        f.iter().any(|x| x.2
            && x.1.starts_with(
                "NVLS not available (GPU 0: fabric manager not running): NCCL's figure"
            )),
        "{f:#?}"
    );
    assert_eq!(at_8gib(&all_reduce(&env), "busbw_no_nvls"), None);
}

/// The child-process transport, through the binary, without a GPU: the hidden subcommand
/// answers for the simulated node, and the parent reads what it answered.
#[test]
fn the_child_process_measures_the_simulated_node_without_nvls() {
    use nodecert::backend::no_nvls::{self, Request, Target};
    use nodecert::backend::sim::{load_node, SimBackend};
    use nodecert::backend::Backend;
    use nodecert::suite::CollectiveOp;
    let sizes = [1u64 << 20, 8 << 30];
    let req = Request::new(
        CollectiveOp::AllReduce,
        &sizes,
        1,
        5,
        Target::Simulated {
            node: "h100-sxm-8".into(),
            faults: vec![],
            seed: 1,
        },
    );
    let exe = assert_cmd::cargo::cargo_bin("nodecert");
    let got = no_nvls::measure(&exe, &req, std::time::Duration::from_secs(60)).expect("answer");
    let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap();
    let want = b
        .collective_no_nvls(CollectiveOp::AllReduce, &sizes, 1, 5)
        .unwrap();
    assert_eq!(got, want);
    // And the figure is the ring's, not NVLS's.
    let t = got[1].time_us[0];
    let busbw = (8u64 << 30) as f64 / (t * 1e-6) / 1e9 * 1.75;
    assert!((340.0..400.0).contains(&busbw), "{busbw}");
    // The child refuses what it cannot read, in a reply the parent can read.
    let env = Env::new();
    let out = env
        .cmd()
        .args([no_nvls::SUBCOMMAND, "{\"protocol\": 1"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(no_nvls::REPLY_MARK), "{text}");
    assert!(text.contains("reading the request"), "{text}");
    // The child reports the NCCL_NVLS_ENABLE it saw: run by hand without it, the parent would
    // refuse the answer (see no_nvls's unit tests).
    assert!(text.contains("\"nvls_enable\":null"), "{text}");
}

/// GPUs that admit one process at a time (a site's `nvidia-smi -c EXCLUSIVE_PROCESS`) refuse
/// the child that measures without NVLS while nodecert holds them: a suite that only shows that
/// figure still passes on NCCL's own, and the report says why the column is missing; a suite
/// that judges the figure without NVLS cannot be judged here (exit 3), naming the mode.
#[test]
fn exclusive_process_gpus_are_not_asked_for_a_second_process() {
    let env = Env::new();
    suite(&env, "");
    let (code, f) = run(&env, &["exclusive-process"]);
    assert_eq!(code, 0, "{f:#?}");
    let c = all_reduce(&env);
    assert!(at_8gib(&c, "busbw").is_some());
    assert_eq!(at_8gib(&c, "busbw_no_nvls"), None, "no second pass");
    let md = env.read("out/report.md");
    assert!(
        md.contains(
            "Not measured with NVLS forced off: that sweep runs in a second process, which the \
             GPUs refuse while nodecert holds them (GPUs 0, 1, 2, 3, 4, 5, 6, 7 are in compute \
             mode Exclusive_Process)."
        ),
        "{md}"
    );
    suite(&env, "nvls = \"off\"\n");
    let (code, f) = run(&env, &["exclusive-process"]);
    assert_eq!(code, 3, "{f:#?}");
    assert!(
        f.iter().any(|(s, r, _)| s == "error"
            && r.contains("cannot be measured here")
            && r.contains("Exclusive_Process")),
        "{f:#?}"
    );
}
