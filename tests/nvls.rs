//! NVLink SHARP known, not guessed (issue 14 item 3), through the binary on the simulated
//! H100: a suite that requires NVLS fails naming the cause when the fabric manager is down, a
//! suite that takes it if available judges the ring by its own floor, and a suite that says
//! nothing about NVLS keeps its meaning.

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
