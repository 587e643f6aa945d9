//! Real-node fixtures (`tests/fixtures/real-nodes/`, issue 14 item 7): node descriptions built
//! from public measurements of real machines pass their suites through the binary, and a copy
//! with one figure 25% lower fails, naming the check (and the GPU or pair) that caught it.

mod util;

use serde_json::Value;
use std::path::PathBuf;
use util::{read_json, Env};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real-nodes")
        .join(name)
}

struct Real {
    /// The node description's file name.
    node: &'static str,
    /// The suite: an embedded name or a fixture file name.
    suite: &'static str,
}

const REAL: [Real; 4] = [
    Real {
        node: "h100-sxm-8.toml",
        suite: "h100-sxm-8",
    },
    Real {
        node: "h200-sxm-8.toml",
        suite: "h200-sxm-8",
    },
    Real {
        node: "a100-sxm-80gb-8.toml",
        suite: "a100-sxm-80gb-8",
    },
    Real {
        node: "rtx-a6000-pcie-8.toml",
        suite: "rtx-a6000-pcie-8.suite.toml",
    },
];

impl Real {
    fn text(&self) -> String {
        std::fs::read_to_string(fixture(self.node)).expect("fixture")
    }

    fn suite_arg(&self) -> String {
        if self.suite.ends_with(".toml") {
            fixture(self.suite).display().to_string()
        } else {
            self.suite.to_string()
        }
    }

    /// `nodecert run SUITE --simulate NODE_TEXT`: the exit code and the evidence.
    fn run(&self, env: &Env, tag: &str, node_text: &str, seed: u64) -> (i32, Value) {
        let node = format!("{tag}.toml");
        env.write(&node, node_text);
        let out = format!("out-{tag}-{seed}");
        let a = env
            .cmd()
            .args(["run", &self.suite_arg(), "--simulate", &node, "-q"])
            .args(["--seed", &seed.to_string(), "--out", &out])
            .assert();
        let code = a.get_output().status.code().expect("exit code");
        (code, read_json(&env.path(&out).join("evidence.json")))
    }
}

fn checks(ev: &Value) -> Vec<(String, String, &Value)> {
    ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
                c,
            )
        })
        .collect()
}

/// The line `key = number` (the first one, at the start of a line) with its number times
/// `factor`.
fn scaled(text: &str, key: &str, factor: f64) -> String {
    let mut done = false;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let Some(rest) = l.strip_prefix(&format!("{key} = ")) else {
                return l.to_string();
            };
            if done {
                return l.to_string();
            }
            let num = rest.split_whitespace().next().expect("a number");
            let v: f64 = num.parse().unwrap_or_else(|_| panic!("{key}: {num}"));
            done = true;
            format!("{key} = {:.3}", v * factor)
        })
        .collect();
    assert!(done, "no line '{key} = ' to degrade");
    out.join("\n") + "\n"
}

fn with_fault(text: &str, fault: &str) -> String {
    format!("{text}\n[[faults]]\n{fault}\n")
}

#[test]
fn every_real_fixture_passes_its_suite() {
    let env = Env::new();
    for r in &REAL {
        for seed in [1, 7, 42] {
            let (code, ev) = r.run(&env, r.node.trim_end_matches(".toml"), &r.text(), seed);
            let bad: Vec<String> = checks(&ev)
                .into_iter()
                .filter(|(_, s, _)| s != "pass")
                .map(|(id, s, c)| format!("{id} {s}: {}", c["summary"]))
                .collect();
            assert!(
                code == 0 && bad.is_empty(),
                "{} on {} seed {seed}: exit {code}, {bad:#?}",
                r.node,
                r.suite
            );
            assert_eq!(ev["simulated"], true);
        }
    }
}

/// One degraded copy of a fixture: how it was made, the check that must fail, and words a
/// failing finding of that check must have in its subject (the GPU or pair).
struct Degraded {
    what: &'static str,
    text: String,
    check: &'static str,
    subject: &'static [&'static str],
}

fn degraded(r: &Real) -> Vec<Degraded> {
    let t = r.text();
    let pcie = r.node.contains("pcie");
    let mut v = vec![
        Degraded {
            what: "every GPU's host-to-device bandwidth 25% lower",
            text: scaled(&t, "h2d_gbps", 0.75),
            check: "host_bandwidth",
            subject: &[],
        },
        Degraded {
            what: "every GPU's host bandwidth both ways at once 25% lower",
            text: scaled(&t, "bidir_gbps", 0.75),
            check: "host_bandwidth",
            subject: &[],
        },
        Degraded {
            what: "GPU 5's host bandwidth 25% lower",
            text: with_fault(&t, "kind = \"slow-host-bandwidth\"\ngpu = 5\nfactor = 0.75"),
            check: "host_bandwidth",
            subject: &["GPU 5"],
        },
        Degraded {
            what: "one pair's peer bandwidth 25% lower",
            text: with_fault(
                &t,
                "kind = \"slow-gpu-pair\"\ngpu = 1\npeer = 6\nfactor = 0.75",
            ),
            check: "p2p_bandwidth",
            subject: &["GPU 1", "GPU 6"],
        },
        Degraded {
            what: "the all-reduce bus bandwidth 25% lower",
            text: scaled(&t, "all_reduce", 0.75),
            check: "collective.all_reduce",
            subject: &[],
        },
        Degraded {
            what: "the device copy bandwidth 25% lower",
            text: scaled(&t, "device_copy_gbps", 0.75),
            check: "host_bandwidth",
            subject: &[],
        },
    ];
    if pcie {
        v.push(Degraded {
            what: "a PIX pair (same switch) 25% lower, still faster than the SYS pairs",
            text: with_fault(
                &t,
                "kind = \"slow-gpu-pair\"\ngpu = 2\npeer = 3\nfactor = 0.75",
            ),
            check: "p2p_bandwidth",
            subject: &["GPU 2", "GPU 3"],
        });
        v.push(Degraded {
            what: "a PIX pair at SYS speed (14% lower, inside the 15% outlier rule): its class's floor",
            text: with_fault(
                &t,
                "kind = \"slow-gpu-pair\"\ngpu = 2\npeer = 3\nfactor = 0.86",
            ),
            check: "p2p_bandwidth",
            subject: &["GPU 2", "GPU 3"],
        });
        let classes = "p2p_pcie_gbps_by_path = { PIX = 26.3, PXB = 26.3, SYS = 22.1 }";
        assert!(t.contains(classes), "{}: {classes}", r.node);
        v.push(Degraded {
            what: "every peer path 25% lower",
            text: t.replace(
                classes,
                "p2p_pcie_gbps_by_path = { PIX = 19.725, PXB = 19.725, SYS = 16.575 }",
            ),
            check: "p2p_bandwidth",
            subject: &[],
        });
    } else {
        v.push(Degraded {
            what: "every NVLink peer path 25% lower",
            text: scaled(&t, "p2p_nvlink_gbps", 0.75),
            check: "p2p_bandwidth",
            subject: &[],
        });
        v.push(Degraded {
            what: "the all-reduce bus bandwidth 8% lower, as with one NVLink of 12 lost (after re-measuring)",
            text: scaled(&t, "all_reduce", 0.92),
            check: "collective.all_reduce",
            subject: &[],
        });
        v.push(Degraded {
            what: "the all-gather bus bandwidth 25% lower",
            text: scaled(&t, "all_gather", 0.75),
            check: "collective.all_gather",
            subject: &[],
        });
    }
    v
}

#[test]
fn every_real_fixture_fails_when_one_figure_is_25_percent_lower() {
    let env = Env::new();
    for r in &REAL {
        for (i, d) in degraded(r).into_iter().enumerate() {
            let tag = format!("{}-degraded-{i}", r.node.trim_end_matches(".toml"));
            let (code, ev) = r.run(&env, &tag, &d.text, 3);
            let all = checks(&ev);
            let Some((_, status, c)) = all.iter().find(|(id, _, _)| id == d.check) else {
                panic!("{}: {}: no check {}", r.node, d.what, d.check);
            };
            assert!(
                code == 1 && status == "fail",
                "{}: {}: exit {code}, {} is {status}: {}",
                r.node,
                d.what,
                d.check,
                c["summary"]
            );
            let failing: Vec<String> = c["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["status"] == "fail")
                .map(|f| {
                    serde_json::from_value::<nodecert::evidence::Subject>(f["subject"].clone())
                        .unwrap()
                        .describe()
                })
                .collect();
            assert!(
                failing
                    .iter()
                    .any(|s| d.subject.iter().all(|w| s.contains(w))),
                "{}: {}: no failing finding of {} names {:?}: {failing:?}",
                r.node,
                d.what,
                d.check,
                d.subject
            );
        }
    }
}

#[test]
fn the_pcie_fixture_gives_each_pair_its_real_path_and_address() {
    // What makes the PCIe box describable at all (issue 14 item 1): its pairs' paths as
    // `nvidia-smi topo -m` prints them and its irregular bus ids, read back from the evidence.
    let r = &REAL[3];
    let env = Env::new();
    let (code, ev) = r.run(&env, "pcie-inventory", &r.text(), 1);
    assert_eq!(code, 0);
    let pairs = ev["node"]["pairs"].as_array().expect("pairs");
    let path = |a: u64, b: u64| {
        pairs
            .iter()
            .find(|p| p["a"] == a && p["b"] == b)
            .map(|p| p["pcie_path"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(
        [path(0, 1), path(0, 2), path(3, 4), path(6, 7), path(4, 7)],
        ["PIX", "PXB", "SYS", "PIX", "PXB"]
    );
    let ids: Vec<&str> = ev["node"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["pci_bus_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "0000:1a:00.0",
            "0000:1b:00.0",
            "0000:3d:00.0",
            "0000:3e:00.0",
            "0000:88:00.0",
            "0000:89:00.0",
            "0000:b1:00.0",
            "0000:b2:00.0"
        ]
    );
}
