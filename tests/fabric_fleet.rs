//! The fabric across nodes through the binary, without a scheduler: four `nodecert run
//! --fabric` processes on simulated nodes, their ranks given as a user would
//! (NODECERT_RANK, NODECERT_WORLD_SIZE, NODECERT_HOSTS, NODECERT_JOB), meet over loopback; one
//! node has a NIC trained at half its rate. Each node's evidence says what was found about it,
//! and `fleet report` names the slow node. A job whose last rank never starts ends within its
//! deadline, each node naming the rank that did not arrive.

mod util;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::{read_json, Env};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The job's key, as a file only its owner reads, at `<length>.key` in the test's folder.
/// Written once, then only renamed into place: the ranks started before read it while later
/// ranks are being started, and rewriting it in place (a truncate, then the bytes) once let a
/// rank read an empty key.
fn key_file(env: &Env, key: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let name = format!("{}.key", key.len());
    let path = env.path(&name);
    if std::fs::read(&path).ok().as_deref() != Some(key.as_bytes()) {
        let tmp = env.path(&format!("{name}.tmp"));
        std::fs::write(&tmp, key).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path.display().to_string()
}

const KEY: &str = "0123456789abcdef0123456789abcdef";

/// `nodecert run h100-sxm-8 --simulate h100-sxm-8 --fabric` as rank `rank` of `size`.
fn rank(
    env: &Env,
    rank: usize,
    size: usize,
    port: u16,
    job: &str,
    suite: &str,
    faults: &[&str],
) -> Child {
    rank_with_key(env, rank, size, port, job, suite, faults, KEY)
}

/// [`rank`], holding `key` as the job's key.
#[allow(clippy::too_many_arguments)]
fn rank_with_key(
    env: &Env,
    rank: usize,
    size: usize,
    port: u16,
    job: &str,
    suite: &str,
    faults: &[&str],
    key: &str,
) -> Child {
    let name = format!("n{}", rank + 1);
    let key = key_file(env, key);
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("nodecert"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env("NODECERT_RANK", rank.to_string())
        .env("NODECERT_WORLD_SIZE", size.to_string())
        .env("NODECERT_HOSTS", format!("n[1-{size}]"))
        .env("NODECERT_JOB", job)
        .env("NODECERT_FABRIC_PORT", port.to_string())
        // The node names do not resolve here: rank 0 is reached on loopback.
        .env("NODECERT_FABRIC_ROOT", "127.0.0.1")
        .env("NODECERT_FABRIC_KEY_FILE", key)
        .current_dir(env.path("."))
        .args(["run", suite, "--simulate", "h100-sxm-8", "--fabric", "-q"])
        .args(["--node-name", &name, "--seed", &(rank + 1).to_string()])
        .args(["--out", &format!("job/{name}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for f in faults {
        c.args(["--inject", f]);
    }
    c.spawn().expect("spawn nodecert")
}

fn status(ev: &serde_json::Value, check: &str) -> String {
    ev["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == check)
        .map(|c| c["status"].as_str().unwrap().to_string())
        .unwrap_or_else(|| "absent".into())
}

#[test]
fn four_nodes_find_the_one_whose_nic_trained_low_and_the_fleet_report_names_it() {
    let env = Env::new();
    let port = free_port();
    let children: Vec<Child> = (0..4)
        .map(|r| {
            let faults: &[&str] = if r == 2 {
                &["nic-downtrained:nic=0"]
            } else {
                &[]
            };
            rank(&env, r, 4, port, "j1", "h100-sxm-8", faults)
        })
        .collect();
    let codes: Vec<Option<i32>> = children
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let o = c.wait_with_output().unwrap();
            if !matches!(o.status.code(), Some(0) | Some(1)) {
                // Say all there is: the exit code, both streams, and what the evidence says.
                let ev =
                    std::fs::read_to_string(env.path(&format!("job/n{}/evidence.json", r + 1)))
                        .map(|t| {
                            let v: serde_json::Value = serde_json::from_str(&t).unwrap_or_default();
                            v["checks"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter(|c| c["status"] != "pass")
                                .map(|c| format!("{}: {} {}\n", c["id"], c["status"], c["summary"]))
                                .collect::<String>()
                        })
                        .unwrap_or_else(|e| format!("no evidence: {e}"));
                panic!(
                    "rank {r} exited {:?}\nstdout:\n{}\nstderr:\n{}\nchecks not passed:\n{ev}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            o.status.code()
        })
        .collect();
    // n3 fails (its NIC, and its network check names the rate); the others pass.
    assert_eq!(codes, [Some(0), Some(0), Some(1), Some(0)]);
    let n3 = read_json(&env.path("job/n3/evidence.json"));
    assert_eq!(status(&n3, "fabric"), "fail");
    assert_eq!(status(&n3, "network"), "fail");
    let n1 = read_json(&env.path("job/n1/evidence.json"));
    assert_eq!(status(&n1, "fabric"), "pass");
    let fabric = n1["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "fabric")
        .unwrap();
    // n1's pairs with its three peers, and the job's figure.
    let metrics = fabric["metrics"].as_array().unwrap();
    let pairs: Vec<(&str, f64)> = metrics
        .iter()
        .filter(|m| m["name"] == "pair_busbw")
        .map(|m| {
            (
                m["subject"]["peer_node"].as_str().unwrap(),
                m["median"].as_f64().unwrap(),
            )
        })
        .collect();
    // 8 x 400 Gb/s NICs: 368 GB/s at most, less latency and noise; n3's at half.
    let peers: Vec<&str> = pairs.iter().map(|p| p.0).collect();
    assert_eq!(peers, ["n2", "n3", "n4"]);
    for (peer, v) in &pairs {
        let want = if *peer == "n3" { 184.0 } else { 368.0 };
        assert!(*v <= want * 1.05 && *v >= want * 0.95, "{pairs:?}");
    }
    // The pairs and the job were measured at every size with the data check.
    let checks = fabric["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == "pair_data" || f["name"] == "job_data")
        .count();
    assert_eq!(checks, 3 + 2, "{fabric}");

    let out = env
        .cmd()
        .args(["fleet", "report", "job", "--out", "fleet"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("drain n3: fabric"), "{stdout}");
    let fleet = read_json(&env.path("fleet/fleet.json"));
    let n3 = fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n3")
        .unwrap();
    assert_eq!(n3["verdict"], "fail");
    assert!(
        n3["why"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("node n3 is below the fabric floor with every node that reaches it")),
        "{n3}"
    );
    for other in ["n1", "n2", "n4"] {
        let n = fleet["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == other)
            .unwrap();
        assert_eq!(n["verdict"], "pass", "{n}");
    }
}

#[test]
fn a_rank_that_never_starts_is_named_by_every_node_within_the_deadline() {
    let env = Env::new();
    env.write(
        "quick.toml",
        "format_version = 1\nname = \"quick\"\nextends = \"h100-sxm-8\"\n[checks.fabric]\ntimeout_s = 3\n",
    );
    let port = free_port();
    let t0 = Instant::now();
    // Ranks 0 and 1 of 3; rank 2 never starts.
    let children: Vec<Child> = (0..2)
        .map(|r| rank(&env, r, 3, port, "j2", "quick.toml", &[]))
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        // Not this node's fault: its fabric is "not measured", nothing failed; but the fabric
        // it was asked to judge was not judged, so it is no pass either: incomplete (5).
        assert_eq!(
            o.status.code(),
            Some(5),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    for n in ["n1", "n2"] {
        let ev = read_json(&env.path(&format!("job/{n}/evidence.json")));
        assert_eq!(status(&ev, "fabric"), "skip", "{n}");
        let text = ev.to_string();
        assert!(text.contains("not measured: "), "{text}");
        assert!(
            text.contains("rank 2 (n3) did not arrive within 3 s"),
            "{n}: {text}"
        );
        assert_eq!(ev["verdict"], "incomplete", "{n}");
        // Version 4 for `unjudged`, and 5 for the training run's partitionings (8 GPUs).
        assert_eq!(ev["format_version"], 5, "{n}");
        let fabric = ev["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "fabric")
            .unwrap();
        assert!(
            fabric["unjudged"]
                .as_str()
                .unwrap()
                .contains("not measured: "),
            "{fabric}"
        );
    }
    // The fleet is not a pass: the node that never came is not tested.
    let o = env
        .cmd()
        .args([
            "fleet", "report", "job", "--expect", "n[1-3]", "--out", "fleet",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn a_simulated_fleet_measures_its_fabric_in_one_command() {
    let env = Env::new();
    let out = env
        .cmd()
        .args(["fleet", "simulate", "--nodes", "3", "--fabric"])
        .args(["--inject", "n02:nic-downtrained:nic=4", "--out", "sim"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("n02: FAIL"), "{stdout}");
    assert!(
        stdout.contains("drain n02: fabric: node n02 is below the fabric floor"),
        "{stdout}"
    );
    let fleet = read_json(&env.path("sim/fleet/fleet.json"));
    assert_eq!(fleet["simulated"], true);
    let verdicts: Vec<&str> = fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["pass", "fail", "pass"]);
    // One node is no fabric.
    let o = env
        .cmd()
        .args([
            "fleet", "simulate", "--nodes", "1", "--fabric", "--out", "one",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_node_with_another_key_is_let_in_by_no_one_and_no_node_is_blamed() {
    let env = Env::new();
    env.write(
        "quick.toml",
        "format_version = 1\nname = \"quick\"\nextends = \"h100-sxm-8\"\n[checks.fabric]\ntimeout_s = 3\n",
    );
    let port = free_port();
    let children: Vec<Child> = (0..2)
        .map(|r| {
            let key = if r == 1 {
                "another job's key, long enough"
            } else {
                KEY
            };
            rank_with_key(&env, r, 2, port, "j3", "quick.toml", &[], key)
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(5),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let n2 = read_json(&env.path("job/n2/evidence.json")).to_string();
    assert!(
        n2.contains("not trusted: could not prove it holds job"),
        "{n2}"
    );
    let n1 = read_json(&env.path("job/n1/evidence.json")).to_string();
    assert!(n1.contains("rank 1 (n2) did not arrive within 3 s"), "{n1}");
    // A node whose key file others can read is not measured either, and says why.
    let env = Env::new();
    let path = key_file(&env, KEY);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o = env
        .cmd()
        .env("NODECERT_RANK", "1")
        .env("NODECERT_WORLD_SIZE", "2")
        .env("NODECERT_HOSTS", "n1,n2")
        .env("NODECERT_JOB", "j4")
        .env("NODECERT_FABRIC_KEY_FILE", &path)
        .args([
            "run",
            "h100-sxm-8",
            "--simulate",
            "h100-sxm-8",
            "--fabric",
            "-q",
            "--out",
            "r",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ev = read_json(&env.path("r/evidence.json")).to_string();
    assert!(ev.contains("can be read by others (mode 0644)"), "{ev}");
}
