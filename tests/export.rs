//! Machine outputs: `--junit` and `--prometheus` on `run` and `render`, checked for format and
//! for agreement with the evidence.

mod util;

use util::{expo, read_json, xml, Env};

const SLOW_PAIR: &[&str] = &[
    "run",
    "--simulate",
    "h100-sxm-8",
    "--inject",
    "slow-gpu-pair:gpu=1,peer=4",
    "--out",
    "out",
    "--junit",
    "junit.xml",
    "--prometheus",
    "nodecert.prom",
];

fn count_status(ev: &serde_json::Value, s: &str) -> usize {
    ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["status"] == s)
        .count()
}

#[test]
fn junit_is_well_formed_and_matches_the_evidence() {
    let env = Env::new();
    env.cmd()
        .args(SLOW_PAIR)
        .assert()
        .code(1)
        .stdout(predicates::str::contains("wrote junit.xml"));
    let ev = read_json(&env.path("out/evidence.json"));
    let root = xml::parse(&env.read("junit.xml")).unwrap_or_else(|e| panic!("junit.xml: {e}"));
    assert_eq!(root.name, "testsuites");
    let suites: Vec<_> = root.children_named("testsuite").collect();
    assert_eq!(suites.len(), 1, "one testsuite");
    let suite = suites[0];
    assert_eq!(suite.attr("name"), Some("h100-sxm-8"));
    let checks = ev["checks"].as_array().expect("checks");
    let cases: Vec<_> = suite.children_named("testcase").collect();
    assert_eq!(cases.len(), checks.len());
    assert_eq!(suite.attr("tests"), Some(checks.len().to_string().as_str()));
    for (attr, status, child) in [
        ("failures", "fail", "failure"),
        ("errors", "error", "error"),
        ("skipped", "skip", "skipped"),
    ] {
        let n = count_status(&ev, status);
        assert_eq!(suite.attr(attr), Some(n.to_string().as_str()), "{attr}");
        assert_eq!(
            cases.iter().filter(|c| c.child(child).is_some()).count(),
            n,
            "<{child}>"
        );
    }
    assert!(count_status(&ev, "fail") > 0);
    for (case, check) in cases.iter().zip(checks) {
        assert_eq!(case.attr("name"), check["id"].as_str());
        assert_eq!(
            case.attr("classname").map(str::to_string),
            Some(format!("nodecert.{}", check["kind"].as_str().unwrap_or("")))
        );
        let t: f64 = case.attr("time").expect("time").parse().expect("seconds");
        assert!(t >= 0.0);
        let out = case.child("system-out").expect("system-out");
        assert!(out.text.starts_with("SIMULATED"), "{}", out.text);
    }
    let p2p = cases
        .iter()
        .find(|c| c.attr("name") == Some("p2p_bandwidth"))
        .expect("p2p case");
    let failure = p2p.child("failure").expect("p2p fails");
    assert!(failure
        .attr("message")
        .is_some_and(|m| m.contains("GPU 1 -> GPU 4")));
    assert!(failure.text.contains("GPU 1 -> GPU 4"));
    let props = suite.child("properties").expect("properties");
    let prop = |k: &str| {
        props
            .children_named("property")
            .find(|p| p.attr("name") == Some(k))
            .and_then(|p| p.attr("value"))
            .map(str::to_string)
    };
    assert_eq!(prop("simulated").as_deref(), Some("true"));
    assert_eq!(prop("suite").as_deref(), Some("h100-sxm-8"));
    assert_eq!(
        prop("node"),
        ev["node"]["hostname"].as_str().map(str::to_string)
    );
}

#[test]
fn prometheus_text_is_strictly_valid_and_matches_the_evidence() {
    let env = Env::new();
    env.cmd().args(SLOW_PAIR).assert().code(1);
    let ev = read_json(&env.path("out/evidence.json"));
    let text = env.read("nodecert.prom");
    let samples = expo::check(&text).unwrap_or_else(|e| panic!("{}\n{text}", e.join("\n")));
    let get = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect::<Vec<_>>()
    };
    for s in &samples {
        assert_eq!(s.labels.get("simulated").map(String::as_str), Some("true"));
        assert_eq!(
            s.labels.get("suite").map(String::as_str),
            Some("h100-sxm-8")
        );
        assert!(s.labels.contains_key("node"));
    }
    assert_eq!(get("nodecert_run_pass", &[])[0].value, 0.0);
    let checks = ev["checks"].as_array().expect("checks");
    assert_eq!(get("nodecert_check_status", &[]).len(), checks.len());
    assert_eq!(
        get("nodecert_check_status", &[("check", "p2p_bandwidth")])[0].value,
        2.0
    );
    assert_eq!(
        get("nodecert_check_status", &[("check", "health")])[0].value,
        0.0
    );
    // 8 GPUs: 56 ordered pairs read and write, 28 pairs both ways.
    assert_eq!(
        get("nodecert_p2p_bandwidth_gbps", &[("mode", "read")]).len(),
        56
    );
    assert_eq!(
        get("nodecert_p2p_bandwidth_gbps", &[("mode", "bidir")]).len(),
        28
    );
    let slow = get(
        "nodecert_p2p_bandwidth_gbps",
        &[("src", "1"), ("dst", "4"), ("mode", "read")],
    );
    let p2p = checks
        .iter()
        .find(|c| c["id"] == "p2p_bandwidth")
        .expect("p2p");
    let median = p2p["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["name"] == "p2p_read" && m["subject"]["gpu"] == 1 && m["subject"]["peer"] == 4)
        .and_then(|m| m["median"].as_f64())
        .expect("median");
    assert_eq!(slow[0].value, median);
    assert_eq!(
        get(
            "nodecert_host_bandwidth_gbps",
            &[("gpu", "0"), ("direction", "h2d")]
        )
        .len(),
        1
    );
    assert!(!get(
        "nodecert_collective_busbw_gbps",
        &[("op", "all_reduce"), ("bytes", "8589934592")]
    )
    .is_empty());
    // The H100 can use NVLS: all_reduce's figure with it forced off is exported beside it.
    let on = get(
        "nodecert_collective_busbw_gbps",
        &[("op", "all_reduce"), ("bytes", "8589934592")],
    )[0]
    .value;
    let off = get(
        "nodecert_collective_busbw_no_nvls_gbps",
        &[("op", "all_reduce"), ("bytes", "8589934592")],
    );
    assert_eq!(off.len(), 1);
    assert!(off[0].value < on, "{} < {on}", off[0].value);
    assert_eq!(get("nodecert_training_samples_per_second", &[]).len(), 1);
    let ts = get("nodecert_run_timestamp_seconds", &[])[0].value;
    assert!(ts > 1.6e9, "{ts}");
}

#[test]
fn render_writes_the_same_outputs_again() {
    let env = Env::new();
    env.cmd().args(SLOW_PAIR).assert().code(1);
    env.cmd()
        .args([
            "render",
            "out",
            "--junit",
            "again.xml",
            "--prometheus",
            "again.prom",
        ])
        .assert()
        // render exits as the run did: the evidence is of a failed run.
        .code(1);
    assert_eq!(env.read("junit.xml"), env.read("again.xml"));
    assert_eq!(env.read("nodecert.prom"), env.read("again.prom"));
}

#[test]
fn odd_strings_are_escaped_in_every_output() {
    let env = Env::new();
    let node = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/suites/nodes/l40s-pcie-4.toml"
    ))
    .expect("node file")
    .replace(
        "hostname = \"sim-l40s-box\"",
        r#"hostname = "box \"7\" <&> back\\slash""#,
    );
    env.write("odd.toml", &node);
    env.cmd()
        .args([
            "run",
            "--simulate",
            "odd.toml",
            "--out",
            "out",
            "-q",
            "--junit",
            "j.xml",
            "--prometheus",
            "m.prom",
        ])
        .assert()
        .code(0);
    let want = "box \"7\" <&> back\\slash";
    let root = xml::parse(&env.read("j.xml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(root.children[0].attr("hostname"), Some(want));
    let samples = expo::check(&env.read("m.prom")).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(samples
        .iter()
        .all(|s| s.labels.get("node").map(String::as_str) == Some(want)));
    let html = env.read("out/report.html");
    assert!(
        html.contains("box &quot;7&quot; &lt;&amp;&gt; back\\slash")
            || html.contains("box &#34;7&#34; &lt;&amp;&gt; back\\slash")
    );
}

#[test]
fn an_output_in_a_missing_folder_fails_before_the_run() {
    let env = Env::new();
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "out",
            "--prometheus",
            "no/such/dir/x.prom",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "--prometheus no/such/dir/x.prom: folder",
        ));
    assert!(!env.path("out/evidence.json").exists(), "nothing ran");
}

#[test]
fn promtool_accepts_the_metrics_when_installed() {
    let Ok(promtool) = which("promtool") else {
        println!("note: promtool not found (apt-get install prometheus); skipping its check");
        return;
    };
    let env = Env::new();
    for (i, node) in ["h100-sxm-8", "l40s-pcie-4", "h200-vm-1"]
        .iter()
        .enumerate()
    {
        let file = format!("m{i}.prom");
        env.cmd()
            .args([
                "run",
                "--simulate",
                node,
                "--out",
                "out",
                "-q",
                "--prometheus",
                &file,
            ])
            .assert()
            .code(0);
        let out = std::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(env.path(&file)).expect("open"))
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool on {node}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

// The checkers themselves: they must reject what they exist to reject.

#[test]
fn the_exposition_checker_rejects_bad_input() {
    let ok = "# HELP a_b x\\ny\n# TYPE a_b gauge\na_b{l=\"q\\\"\\\\\\n\"} 1.5\na_b{l=\"r\"} NaN\n";
    assert!(expo::check(ok).is_ok(), "{:?}", expo::check(ok));
    for bad in [
        "# TYPE a gauge\na 1",                                      // no final newline
        "a 1\n",                                                    // no TYPE
        "# TYPE 1a gauge\n1a 1\n",                                  // bad name
        "# TYPE a gauge\na{1l=\"x\"} 1\n",                          // bad label name
        "# TYPE a gauge\na{l=\"x\\t\"} 1\n",                        // bad escape
        "# TYPE a gauge\na{l=\"x} 1\n",                             // unterminated
        "# TYPE a gauge\na{l=x} 1\n",                               // unquoted
        "# TYPE a gauge\na one\n",                                  // not a float
        "# TYPE a gauge\na{l=\"x\"} 1\na{l=\"x\"} 2\n",             // duplicate series
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",                    // TYPE twice
        "# TYPE a gauge\na 1\n# HELP a late\n",                     // HELP after samples
        "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 1\n", // family split
        "# TYPE a gauge\na{l=\"x\",l=\"y\"} 1\n",                   // label twice
        "# TYPE a sometype\na 1\n",                                 // unknown type
    ] {
        assert!(expo::check(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn the_xml_checker_rejects_bad_input() {
    assert!(xml::parse("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/>t&amp;&#10;</a>\n").is_ok());
    for bad in [
        "<a><b></a></b>",
        "<a x=\"1\" x=\"2\"/>",
        "<a x=1/>",
        "<a>&nbsp;</a>",
        "<a>x & y</a>",
        "<a x=\"<\"/>",
        "<a/><b/>",
        "<a>",
        "<a>\u{1}</a>",
    ] {
        assert!(xml::parse(bad).is_err(), "accepted {bad:?}");
    }
}

/// Exports are checked again when written; one inside the report folder of a signed run is
/// written before the signature, so the run's own signature does not refuse it, and the
/// signature still verifies.
#[test]
fn an_export_inside_the_signed_report_folder_is_written_and_the_signature_verifies() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    std::fs::create_dir(env.path("cert")).unwrap();
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "cert",
            "--sign-key",
            "k",
            "--junit",
            "cert/junit.xml",
        ])
        .assert()
        .code(0)
        .stdout(predicates::str::contains("wrote cert/junit.xml"));
    assert!(xml::parse(&env.read("cert/junit.xml")).is_ok());
    env.cmd()
        .args(["verify", "cert", "--pubkey", "k.pub"])
        .assert()
        .code(0);
    // Into a folder signed by an earlier run, only with --force.
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "again",
            "--junit",
            "cert/junit.xml",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("holds a signed report"));
}
