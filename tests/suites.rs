//! Every kind of invalid suite gets an error naming file, line and column, and exit 2.

mod util;
use predicates::prelude::*;
use util::Env;

/// (suite text, expected "line:column", words the message must contain)
const BROKEN: &[(&str, &str, &str)] = &[
    // TOML syntax
    ("format_version = 1\nname = \"x\"\n[node\ngpu_count = 8\n", "3:6", ""),
    // missing format version
    ("name = \"x\"\n", "1:1", "missing `format_version`"),
    // future format version
    ("format_version = 7\nname = \"x\"\n", "1:1", "format_version = 7 is not supported"),
    // unknown key at top level and nested
    ("format_version = 1\nname = \"x\"\ncolour = 1\n", "3:1", "unknown field `colour`"),
    ("format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\ngpu_modle = \"H100\"\n", "5:1", "unknown field `gpu_modle`"),
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = 48, warn_belw = 52 }\n",
        "4:26",
        "unknown field `warn_belw`",
    ),
    // unknown collective
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_sum]\n", "3:20", "unknown variant `all_sum`"),
    // inside a collective's table: located at the key, the collective named in the path
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_gather]\nfactor = 2\nmin_sise = \"8B\"\n",
        "5:1",
        "checks.collective.all_gather.min_sise: unknown field `min_sise`",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\n\nfactor = \"2\"\n",
        "5:1",
        "checks.collective.all_reduce.factor: invalid type",
    ),
    // wrong type
    ("format_version = 1\nname = \"x\"\n[node]\ngpu_count = \"eight\"\n", "4:1", "node.gpu_count"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nsize = \"12 parsecs\"\n", "4:1", "unknown size unit"),
    // missing value
    ("format_version = 1\n[node]\ngpu_count = 8\n", "1:1", "missing field `name`"),
    ("format_version = 1\nname = \"x\"\n[topology]\nnvlink_pairs = [{ a = 0, b = 1 }]\n", "4:17", "missing field `links`"),
    // impossible values
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = -5.0 }\n",
        "4:9",
        "fail_below must be a number >= 0",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\n[topology]\nnvlink_pairs = [{ a = 0, b = 1, links = 12 }, { a = 2, b = 9, links = 12 }]\n",
        "6:56",
        "GPU index 9 is out of range: the node has 8 GPUs",
    ),
    // a typical value: positive, and its fraction only beside it
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nread = { typical = -3.0 }\n",
        "4:10",
        "typical must be a number > 0",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nread = { fail_below = 3.0, typical_fraction = 0.8 }\n",
        "4:28",
        "typical_fraction needs typical",
    ),
    // topology relations: GPU indexes in range, each GPU once, known path classes, pairs once
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\n[topology]\nsocket_groups = [[0, 1, 2, 3], [4, 5, 6, 8]]\n",
        "6:42",
        "GPU index 8 is out of range: the node has 8 GPUs",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\n[topology]\nnuma_groups = [[0, 1], [1, 2]]\n",
        "6:25",
        "GPU 1 is in more than one place of numa_groups",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 4\n[topology]\npcie_paths = [{ a = 0, b = 1, path = \"PCI\" }]\n",
        "6:31",
        "unknown variant `PCI`",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 4\n[topology]\npcie_paths = [{ a = 0, b = 1, path = \"PIX\" }, { a = 1, b = 0, path = \"SYS\" }]\n",
        "6:47",
        "the pair 1-0 is listed twice",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = 48.0, warn_below = 40.0 }\n",
        "4:28",
        "warn_below (40) is below fail_below (48)",
    ),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmin_size = \"1GiB\"\nmax_size = \"1MiB\"\n", "5:1", "max_size (1 MiB) is smaller than min_size (1 GiB)"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmin_busbw_gbps = { \"8 parsecs\" = 3 }\n", "4:20", "must be a message size"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\noutlier_pct = 150\n", "4:1", "outlier_pct must be between 0 and 100"),
    ("format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nwarmup = 4294967295\n", "4:1", "warmup must be at most 100000"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_gather]\niterations = 200000\n", "4:1", "iterations must be at most 100000"),
    ("format_version = 1\nname = \"x\"\n[checks.health]\nfail_throttle = [\"hw_slowdown\", \"too_hot\"]\n", "4:33", "unknown throttle reason 'too_hot'"),
    ("format_version = 1\nname = \"x\"\n[node]\ndriver_min = \"five\"\n", "4:1", "'five' is not a version"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nlayers = [1024]\n", "4:1", "layers needs at least"),
    // baseline: range, unknown key, missing file (read while loading, before any run)
    ("format_version = 1\nname = \"x\"\n[baseline]\nevidence = \"old.json\"\nmax_regression_pct = 100\n", "5:1", "max_regression_pct must be between 0 and 100"),
    ("format_version = 1\nname = \"x\"\n[baseline]\nevidence = \"old.json\"\nmax_regresion_pct = 3\n", "5:1", "unknown field `max_regresion_pct`"),
    ("format_version = 1\nname = \"x\"\n[baseline]\nevidence = \"old.json\"\n", "4:1", "cannot read old.json"),
];

#[test]
fn every_broken_suite_is_located_and_exits_2() {
    let env = Env::new();
    for (i, (text, at, words)) in BROKEN.iter().enumerate() {
        let name = format!("broken{i}.toml");
        env.write(&name, text);
        let a = env.cmd().args(["check", &name]).assert().code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(
            err.contains(&format!("{name}:{at}:")),
            "case {i}: expected {name}:{at}: in\n{err}"
        );
        assert!(
            err.contains(words),
            "case {i}: expected '{words}' in\n{err}"
        );
        // `run` validates before touching any node.
        env.cmd()
            .args(["run", &name, "--simulate", "h100-sxm-8"])
            .assert()
            .code(2);
    }
}

#[test]
fn errors_in_an_inherited_file_name_that_file() {
    let env = Env::new();
    env.write("parent.toml", "format_version = 1\nname = \"p\"\n[checks.p2p_latency]\nlatency_us = { fail_above = 5.0, warn_above = 9.0 }\n");
    env.write(
        "child.toml",
        "format_version = 1\nname = \"c\"\nextends = \"parent.toml\"\n",
    );
    env.cmd()
        .args(["check", "child.toml"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("parent.toml:4:34:").and(predicate::str::contains(
                "warn_above (9) is above fail_above (5)",
            )),
        );
    env.write(
        "loop-a.toml",
        "format_version = 1\nname = \"a\"\nextends = \"loop-b.toml\"\n",
    );
    env.write(
        "loop-b.toml",
        "format_version = 1\nname = \"b\"\nextends = \"loop-a.toml\"\n",
    );
    env.cmd()
        .args(["check", "loop-a.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cycle"));
    env.write(
        "orphan.toml",
        "format_version = 1\nname = \"o\"\nextends = \"nowhere.toml\"\n",
    );
    env.cmd()
        .args(["check", "orphan.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("orphan.toml:3:1:"));
}

#[test]
fn a_child_overrides_parts_of_an_embedded_suite() {
    let env = Env::new();
    // Raise one floor above what the node delivers: only that check fails.
    env.write(
        "strict.toml",
        "format_version = 1\nname = \"strict-h100\"\nextends = \"h100-sxm-8\"\n[checks.host_bandwidth]\nh2d = { fail_below = 60.0, warn_below = 61.0 }\n[checks.training]\nenabled = false\n",
    );
    env.cmd()
        .args([
            "run",
            "strict.toml",
            "--simulate",
            "h100-sxm-8",
            "--out",
            "o",
            "-q",
        ])
        .assert()
        .code(1);
    let ev = util::read_json(&env.path("o/evidence.json"));
    let checks = ev["checks"].as_array().unwrap();
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["host_bandwidth"]);
    assert!(
        checks.iter().all(|c| c["id"] != "training"),
        "training was disabled"
    );
    // The inherited d2h floor stayed.
    assert_eq!(
        ev["suite"]["resolved"]["checks"]["host_bandwidth"]["d2h"]["fail_below"],
        48.0
    );
    assert_eq!(ev["suite"]["chain"][1], "embedded:h100-sxm-8");
}

#[test]
fn missing_suite_file_is_invalid_input() {
    let env = Env::new();
    env.cmd()
        .args(["check", "nope.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read nope.toml"));
    env.cmd()
        .args(["check", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("embedded: base"));
}
