//! The real backend (NVML, sysfs, the kernel log; no `--simulate`) run through the product
//! against the fake NVML of the workspace (fake-nvml), loaded as libnvidia-ml.so.1 through
//! LD_LIBRARY_PATH: an 8-GPU NVSwitch node, an 8-GPU PCIe node with mixed paths, NotSupported
//! answers, lost GPUs, row remapping and XID events. No machine here has a GPU, so these are the
//! only tests of the 8-GPU NVML reading that run in CI.
//!
//! What the platform reads outside NVML (sysfs NUMA nodes, hypervisor witnesses, the kernel log)
//! is this machine's: the tests assert only what does not depend on it.

mod util;

use serde_json::{json, Value};
use util::{fake_nvml::use_fake, Env};

/// A node under test: its description, written for the fake, and commands that use it.
struct Node {
    env: Env,
}

impl Node {
    fn new(description: &Value) -> Self {
        let env = Env::new();
        env.write("node.json", &description.to_string());
        Node { env }
    }

    fn cmd(&self) -> assert_cmd::Command {
        let mut c = self.env.cmd();
        use_fake(&mut c, &self.env.path("node.json"));
        c
    }

    /// `nodecert inventory --json`: the inventory, after checking the command succeeded.
    fn inventory(&self) -> Value {
        let out = self
            .cmd()
            .args(["inventory", "--json"])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["simulated"], false);
        v["inventory"].clone()
    }

    /// `nodecert run suite.toml` with this suite text: its exit code and evidence.
    fn run(&self, suite: &str) -> (i32, Value) {
        self.env.write("suite.toml", suite);
        self.run_suite("suite.toml")
    }

    /// `nodecert run SUITE` (a file or an embedded suite): its exit code and evidence.
    fn run_suite(&self, suite: &str) -> (i32, Value) {
        let _ = std::fs::remove_dir_all(self.env.path("report"));
        let out = self
            .cmd()
            .args(["run", suite, "--quiet", "--out", "report"])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        let code = out.status.code().expect("exit code");
        let ev = util::read_json(&self.env.path("report/evidence.json"));
        (code, ev)
    }
}

/// Every finding of the evidence: (check kind, status, subject, reason).
fn findings(ev: &Value) -> Vec<(String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .flat_map(|c| {
            let kind = s(&c["kind"]);
            c["findings"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |f| {
                    (
                        kind.clone(),
                        s(&f["status"]),
                        serde_json::from_value::<nodecert::evidence::Subject>(f["subject"].clone())
                            .unwrap()
                            .describe(),
                        s(&f["reason"]),
                    )
                })
        })
        .collect()
}

fn failures(ev: &Value) -> Vec<(String, String, String, String)> {
    findings(ev).into_iter().filter(|f| f.1 == "fail").collect()
}

/// Whether this machine's sysfs has a PCI device at `bus`: the platform then reads its NUMA
/// node there before asking NVML.
fn host_has_pci(bus: &str) -> bool {
    std::path::Path::new("/sys/bus/pci/devices")
        .join(bus)
        .exists()
}

const HGX_BUS: [&str; 8] = [
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
];
const SWITCH_BUS: [&str; 4] = [
    "00000000:05:00.0",
    "00000000:06:00.0",
    "00000000:07:00.0",
    "00000000:08:00.0",
];

/// A healthy GPU as NVML answers on bare metal: every reading answered, nothing wrong.
fn healthy_gpu(i: usize, name: &str, bus: &str, memory: u64, numa: u32, cpus: &str) -> Value {
    json!({
        "name": name,
        "uuid": format!("GPU-00000000-0000-0000-0000-00000000000{i}"),
        "serial": format!("165432100{i}"),
        "vbios": "96.00.74.00.01",
        "pci_bus_id": bus,
        "pci_device_id": 0x233510de_u32,
        "memory_total_bytes": memory,
        "persistence_mode": true,
        "mig_mode": 0,
        "compute_mode": 0,
        "processes": [],
        "ecc_mode": true,
        "ecc": {
            "volatile_corrected": 0, "volatile_uncorrected": 0,
            "aggregate_corrected": 0, "aggregate_uncorrected": 0,
            "sram_corrected": 0, "sram_uncorrected": 0,
            "dram_corrected": 0, "dram_uncorrected": 0
        },
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": false},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": false, "failure": false},
        "temperature_c": 34,
        "power_limit_mw": 700000,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1980,
        "throttle_reasons": 1,
        "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16,
                 "replay_counter": 0},
        "numa_node": numa,
        "cpu_affinity": cpus,
        "virtualization_mode": "none",
        "xid_events": [],
    })
}

/// An HGX H200 board: 8 GPUs, 18 NVLink 4.0 links each to 4 NVSwitches, two sockets.
fn hgx_h200() -> Value {
    let gpus: Vec<Value> = (0..8)
        .map(|i| {
            let numa = (i / 4) as u32;
            let cpus = if numa == 0 {
                "0-47,96-143"
            } else {
                "48-95,144-191"
            };
            let mut g = healthy_gpu(i, "NVIDIA H200", HGX_BUS[i], 150_754_820_096, numa, cpus);
            g["nvlinks"] = (0..18)
                .map(|l| {
                    json!({
                        "active": true, "version": 6,
                        "remote_bus_id": SWITCH_BUS[l % 4], "remote_type": "switch",
                        "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
                    })
                })
                .collect();
            // Registered with the NVLink fabric by a running fabric manager.
            g["fabric"] = json!({"state": 3, "status": 0});
            g
        })
        .collect();
    let same_socket: Vec<Value> = (0..8)
        .flat_map(|a| ((a + 1)..8).map(move |b| (a, b)))
        .filter(|(a, b)| a / 4 == b / 4)
        .map(|(a, b)| {
            json!({"a": a, "b": b, "path": "NODE", "p2p_read": "ok", "p2p_write": "ok",
                             "p2p_nvlink": "ok", "p2p_atomics": "ok"})
        })
        .collect();
    json!({
        "driver_version": "570.133.20",
        "cuda_driver_version": 12080,
        "nvml_version": "12.570.133.20",
        "gpus": gpus,
        "pair_default": {"path": "SYS", "p2p_read": "ok", "p2p_write": "ok",
                         "p2p_nvlink": "ok", "p2p_atomics": "ok"},
        "pairs": same_socket,
    })
}

/// The suite the HGX board is judged by: h200-sxm-8's node and topology, with base's
/// topology, virtualization and health checks only (no CUDA measurement: no libcuda here).
const HGX_SUITE: &str = r#"
format_version = 1
name = "hgx-h200-nvml"
extends = "base"

[node]
gpu_count = 8
gpu_model = "H200"
memory_gib_min = 139.0
driver_min = "550.54"
virtualization = "any"

[topology]
nvlinks_per_pair = 18
nvswitch = true
pcie_gen = 5
pcie_width = 16
numa_nodes = [0, 0, 0, 0, 1, 1, 1, 1]
"#;

#[test]
fn an_hgx_board_reads_as_eight_gpus_on_four_nvswitches() {
    let inv = Node::new(&hgx_h200()).inventory();
    let gpus = inv["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 8);
    assert_eq!(inv["nvswitches"], 4);
    assert_eq!(inv["driver_version"], "570.133.20");
    assert_eq!(inv["cuda_driver_version"], "12.8");
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["index"], i);
        assert_eq!(g["name"], "NVIDIA H200");
        // Ordered by bus id (no CUDA), written as the kernel writes it.
        assert_eq!(g["pci_bus_id"], HGX_BUS[i][4..].to_lowercase());
        assert_eq!(g["vbios"], "96.00.74.00.01");
        assert_eq!(g["memory_bytes"], 150_754_820_096_u64);
        assert_eq!(g["power_limit_w"], 700.0);
        assert_eq!(g["throttle_reasons"], json!(["gpu_idle"]));
        assert_eq!(g["ecc"]["dram_errors"], 0);
        assert_eq!(g["retired_pages"]["pending"], false);
        assert_eq!(g["nvls"]["fabric"], "completed");
        assert_eq!(g["compute_mode"], "default");
        assert_eq!(g["persistence_mode"], true);
        // No libcuda here: multicast support is not read, never "no".
        assert_eq!(g["nvls"]["multicast"], Value::Null);
        let links = g["nvlinks"].as_array().expect("links");
        assert_eq!(links.len(), 18);
        assert!(links.iter().all(|l| l["active"] == true
            && l["version"] == 4
            && l["remote"]["kind"] == "nv_switch"
            && l["errors"]["replay"] == 0));
        assert_eq!(
            g["cpu_affinity"],
            if i < 4 {
                "0-47,96-143"
            } else {
                "48-95,144-191"
            }
        );
        if !host_has_pci(&HGX_BUS[i][4..].to_lowercase()) {
            assert_eq!(g["numa_node"], i / 4, "from NVML's memory affinity");
        }
    }
    let pairs = inv["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 28);
    for p in pairs {
        assert_eq!(p["nvlinks"], 18, "{p}");
        let same = p["a"].as_u64() < Some(4) && p["b"].as_u64() < Some(4)
            || p["a"].as_u64() >= Some(4) && p["b"].as_u64() >= Some(4);
        assert_eq!(p["pcie_path"], if same { "NODE" } else { "SYS" }, "{p}");
        assert_eq!(p["p2p"]["nvlink"], true);
    }
    let unavailable: Vec<&str> = inv["unavailable"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| n.starts_with("gpu") && !n.starts_with("gpu order"))
        // The socket of a NUMA node comes from this machine's sysfs, not from NVML: a test
        // machine without the node the fake GPUs sit on cannot say it.
        .filter(|n| !n.ends_with("cpu socket: not reported"))
        .collect();
    assert!(
        unavailable.is_empty(),
        "every reading answered: {unavailable:?}"
    );
}

/// NVML's compute modes as the inventory records them; a driver that does not answer leaves
/// the mode unknown (absent), with a note, never "default". MIG mode: on where NVML says so,
/// off where it says off or that the GPU has no MIG.
#[test]
fn each_gpus_compute_mode_is_read_from_nvml() {
    let mut d = hgx_h200();
    for (i, m) in [(1, 1), (2, 2), (3, 3)] {
        d["gpus"][i]["compute_mode"] = json!(m);
    }
    let g4 = d["gpus"][4].as_object_mut().expect("gpu");
    g4.remove("compute_mode");
    // A GPU without MIG (NVML: not supported) is not in MIG mode; one in it says so.
    g4.remove("mig_mode");
    d["gpus"][5]["mig_mode"] = json!(1);
    let inv = Node::new(&d).inventory();
    let modes: Vec<Value> = (0..5)
        .map(|i| inv["gpus"][i]["compute_mode"].clone())
        .collect();
    assert_eq!(
        modes,
        [
            json!("default"),
            json!("exclusive_thread"),
            json!("prohibited"),
            json!("exclusive_process"),
            Value::Null
        ]
    );
    let notes = inv["unavailable"].to_string();
    assert!(
        notes.contains("gpu4 compute mode: not supported"),
        "{notes}"
    );
    assert!(!notes.contains("mig mode"), "{notes}");
    let mig: Vec<&Value> = (3..6).map(|i| &inv["gpus"][i]["mig_enabled"]).collect();
    assert_eq!(mig, [&json!(false), &json!(false), &json!(true)]);
}

/// A MIG mode pending for the next reset is read from NVML beside the current one (recorded
/// only where the two differ), named in the inventory, and warned about by topology: the node
/// measured whole is not the one after a reboot.
#[test]
fn a_mig_mode_pending_for_the_next_reset_is_read_and_warned_about() {
    let mut d = hgx_h200();
    d["gpus"][2]["mig_pending"] = json!(1);
    d["gpus"][3]["mig_pending"] = json!(0);
    // A pending value that is neither off nor on says nothing.
    d["gpus"][4]["mig_pending"] = json!(7);
    let node = Node::new(&d);
    let inv = node.inventory();
    let pending: Vec<&Value> = (0..5).map(|i| &inv["gpus"][i]["mig_pending"]).collect();
    assert_eq!(
        pending,
        [
            &Value::Null,
            &Value::Null,
            &json!(true),
            &Value::Null,
            &Value::Null
        ]
    );
    assert_eq!(inv["gpus"][2]["mig_enabled"], json!(false));
    let out = node.cmd().arg("inventory").output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MIG off (on at next reset)"), "{text}");
    assert_eq!(text.matches("at next reset").count(), 1, "{text}");
    let (code, ev) = node.run(HGX_SUITE);
    let warned: Vec<_> = findings(&ev)
        .into_iter()
        .filter(|f| f.0 == "topology" && f.1 == "warn")
        .collect();
    assert_eq!(warned.len(), 1, "{:#?}", findings(&ev));
    assert_eq!(warned[0].2, "GPU 2");
    assert!(
        warned[0]
            .3
            .starts_with("GPU 2 has MIG mode off, but set to turn on at its next reset"),
        "{}",
        warned[0].3
    );
    // A warning: the node passes as it is today.
    assert_eq!(code, 0, "{:#?}", findings(&ev));
}

/// Another process on a GPU is read from NVML's process list, named, and makes the run
/// untestable (exit 3), not a failure of the GPU; memory in use that no listed process explains
/// does too; a list NVML does not give is "not available here", never "none".
#[test]
fn other_processes_on_a_gpu_make_the_run_untestable_naming_them() {
    let mut d = hgx_h200();
    d["gpus"][2]["processes"] = json!([
        {"pid": 4242, "name": "python3", "used_bytes": 30_u64 << 30},
        {"pid": 4243, "used_bytes": null},
    ]);
    d["gpus"][5]["memory_used_unlisted_bytes"] = json!(2_u64 << 30);
    d["gpus"][6]
        .as_object_mut()
        .expect("gpu")
        .remove("processes");
    let node = Node::new(&d);
    let inv = node.inventory();
    assert_eq!(
        inv["gpus"][2]["processes"],
        json!([
            {"pid": 4242, "name": "python3", "memory_bytes": 30_u64 << 30},
            {"pid": 4243},
        ])
    );
    assert_eq!(inv["gpus"][2]["memory_used_bytes"], json!(30_u64 << 30));
    assert_eq!(inv["gpus"][0]["processes"], json!([]));
    assert_eq!(inv["gpus"][0]["memory_used_bytes"], json!(0));
    assert_eq!(inv["gpus"][6]["processes"], Value::Null);
    let notes = inv["unavailable"].to_string();
    assert!(
        notes.contains("gpu6 compute processes: not supported"),
        "{notes}"
    );

    let (code, ev) = node.run(HGX_SUITE);
    assert_eq!(code, 3, "{:#?}", findings(&ev));
    assert_eq!(failures(&ev), vec![], "a busy GPU is not a failed one");
    let on = |gpu: &str| -> Vec<(String, String)> {
        findings(&ev)
            .into_iter()
            .filter(|f| f.0 == "health" && f.2 == gpu && f.3.contains("process"))
            .map(|f| (f.1, f.3))
            .collect()
    };
    assert_eq!(
        on("GPU 2"),
        [(
            "error".to_string(),
            "GPU 2 is in use by pid 4242 (python3, 30 GiB), pid 4243: what is measured beside \
             it is a share of the GPU, not the GPU; stop them and run again (`nvidia-smi \
             --query-compute-apps=pid,process_name,used_memory --format=csv` lists them)"
                .to_string()
        )]
    );
    let gpu5 = on("GPU 5");
    assert_eq!(gpu5.len(), 1, "{gpu5:#?}");
    assert_eq!(gpu5[0].0, "error");
    assert!(
        gpu5[0]
            .1
            .starts_with("GPU 5 has 2 GiB of memory in use that no process NVML lists"),
        "{gpu5:#?}"
    );
    assert_eq!(
        on("GPU 6"),
        [(
            "skip".to_string(),
            "not available here: processes of GPU 6".to_string()
        )]
    );
    assert_eq!(
        on("GPU 0"),
        [("pass".to_string(), "GPU 0 processes: none".to_string())]
    );
}

#[test]
fn a_healthy_hgx_board_passes_and_each_fault_fails_naming_its_gpu() {
    let (code, ev) = Node::new(&hgx_h200()).run(HGX_SUITE);
    assert_eq!(failures(&ev), vec![], "{:#?}", findings(&ev));
    assert_eq!(code, 0, "{:#?}", findings(&ev));
    assert_eq!(ev["backend"]["simulated"], false);
    let kinds: Vec<&str> = ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["topology", "virtualization", "health", "network"]);

    // NVLink 7 of GPU 3 is down: GPU 3 reaches its peers over 17 links, not 18.
    let mut d = hgx_h200();
    d["gpus"][3]["nvlinks"][7]["active"] = json!(false);
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        !f.is_empty() && f.iter().all(|f| f.0 == "topology" && f.2.contains("GPU 3")),
        "{f:#?}"
    );

    // Two uncorrectable ECC errors on GPU 5.
    let mut d = hgx_h200();
    d["gpus"][5]["ecc"]["volatile_uncorrected"] = json!(2);
    d["gpus"][5]["ecc"]["aggregate_uncorrected"] = json!(2);
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        !f.is_empty() && f.iter().all(|f| f.0 == "health" && f.2 == "GPU 5"),
        "{f:#?}"
    );

    // NVML GPU 6 fell off the bus after NVML handed out its handle: it answers nothing, not
    // even its bus id, so it has no place in the order; it must still fail the node.
    let mut d = hgx_h200();
    d["gpus"][6]["lost"] = json!("after_open");
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        f.iter().any(|f| f.0 == "health"
            && f.2 == "NVML GPU 6"
            && f.3.contains("fell off the bus")
            && f.3.contains("nvmlDeviceGetUUID(6)")),
        "{f:#?}"
    );
    assert!(
        f.iter()
            .any(|f| f.0 == "topology" && f.3.contains("1 of 8 GPUs missing")),
        "{f:#?}"
    );

    // GPU 2 answers who it is, then stops answering in the middle of the reading.
    let mut d = hgx_h200();
    d["gpus"][2]["errors"] = json!({
        "nvmlDeviceGetEccMode": "gpu_is_lost",
        "nvmlDeviceGetTotalEccErrors": "gpu_is_lost",
        "nvmlDeviceGetTemperature": "gpu_is_lost",
    });
    let node = Node::new(&d);
    let (code, ev) = node.run(HGX_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        f.iter().any(|f| f.0 == "health"
            && f.2.starts_with("GPU 2")
            && f.3.contains("fell off the bus")),
        "{f:#?}"
    );
    // With no suite named, that GPU (listed, then lost) counts once: the node is held to the
    // 8-GPU suite and fails, rather than counted as 9 and turned away.
    let _ = std::fs::remove_dir_all(node.env.path("report"));
    let out = node
        .cmd()
        .args(["run", "--quiet", "--out", "report"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Not 2 (no suite): 3, as the suite's GPU checks cannot measure without CUDA here, which
    // outranks the health failure that is there all the same.
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let ev = util::read_json(&node.env.path("report/evidence.json"));
    assert_eq!(ev["suite"]["name"], "h200-sxm-8");
    assert!(
        failures(&ev).iter().any(|f| f.0 == "health"
            && f.2.starts_with("GPU 2")
            && f.3.contains("fell off the bus")),
        "{:#?}",
        failures(&ev)
    );
}

/// An 8-GPU PCIe box (L40S, no NVLink), two sockets with mixed paths: on socket 0 two PCIe
/// switches under one root complex (PIX inside a switch, PXB across), on socket 1 two switches
/// on different root ports (PIX, NODE); SYS across sockets, where the chipset refuses P2P.
fn pcie_box() -> Value {
    let bus = [
        "00000000:1B:00.0",
        "00000000:1C:00.0",
        "00000000:3D:00.0",
        "00000000:3E:00.0",
        "00000000:99:00.0",
        "00000000:9A:00.0",
        "00000000:C3:00.0",
        "00000000:C4:00.0",
    ];
    let gpus: Vec<Value> = (0..8)
        .map(|i| {
            let numa = (i / 4) as u32;
            let cpus = if numa == 0 { "0-31" } else { "32-63" };
            let mut g = healthy_gpu(i, "NVIDIA L40S", bus[i], 48_305_799_168, numa, cpus);
            g["pcie"] = json!({"gen_current": 4, "gen_max": 4, "width_current": 16,
                               "width_max": 16, "replay_counter": 0});
            g["power_limit_mw"] = json!(350000);
            g
        })
        .collect();
    let pairs: Vec<Value> = (0..8)
        .flat_map(|a| ((a + 1)..8).map(move |b| (a, b)))
        .map(|(a, b)| {
            let (path, p2p) = match (a / 4 == b / 4, a / 2 == b / 2) {
                (_, true) => ("PIX", "ok"),
                (true, false) if a < 4 => ("PXB", "ok"),
                (true, false) => ("NODE", "ok"),
                (false, _) => ("SYS", "ok"),
            };
            json!({"a": a, "b": b, "path": path, "p2p_read": p2p, "p2p_write": p2p,
                   "p2p_nvlink": "not_supported", "p2p_atomics": "not_supported"})
        })
        .collect();
    json!({
        "driver_version": "550.127.05",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.127.05",
        "gpus": gpus,
        "pairs": pairs,
    })
}

const PCIE_SUITE: &str = r#"
format_version = 1
name = "l40s-pcie-8-nvml"
extends = "base"

[node]
gpu_count = 8
gpu_model = "L40S"
memory_gib_min = 44.0
driver_min = "535.104"
virtualization = "any"

[topology]
nvlinks_per_pair = 0
nvswitch = false
pcie_gen = 4
pcie_width = 16
"#;

#[test]
fn a_pcie_box_reads_its_mixed_paths_and_passes() {
    let node = Node::new(&pcie_box());
    let inv = node.inventory();
    assert_eq!(inv["gpus"].as_array().map(Vec::len), Some(8));
    assert_eq!(inv["nvswitches"], 0);
    let path = |a: u64, b: u64| {
        inv["pairs"]
            .as_array()
            .expect("pairs")
            .iter()
            .find(|p| p["a"] == a && p["b"] == b)
            .unwrap_or_else(|| panic!("pair {a}-{b}"))
            .clone()
    };
    assert_eq!(path(0, 1)["pcie_path"], "PIX");
    assert_eq!(path(0, 2)["pcie_path"], "PXB");
    assert_eq!(path(4, 6)["pcie_path"], "NODE");
    assert_eq!(path(6, 7)["pcie_path"], "PIX");
    assert_eq!(path(3, 4)["pcie_path"], "SYS");
    assert_eq!(path(3, 4)["p2p"]["read"], true);
    assert_eq!(path(0, 2)["p2p"]["read"], true);
    assert_eq!(path(0, 2)["p2p"]["nvlink"], false);
    for p in inv["pairs"].as_array().expect("pairs") {
        assert_eq!(p["nvlinks"], 0);
    }
    let notes = inv["unavailable"].to_string();
    for i in 0..8 {
        assert!(
            notes.contains(&format!("gpu{i} nvlink: not supported (no NVLink)")),
            "{notes}"
        );
        assert_eq!(inv["gpus"][i]["nvlinks"], json!([]));
    }

    let (code, ev) = node.run(PCIE_SUITE);
    assert_eq!(failures(&ev), vec![], "{:#?}", findings(&ev));
    assert_eq!(code, 0);

    // The chipset refuses peer access across one pair: the pair fails, by name.
    let mut d = pcie_box();
    let refused = d["pairs"]
        .as_array_mut()
        .expect("pairs")
        .iter_mut()
        .find(|p| p["a"] == 3 && p["b"] == 4)
        .expect("pair 3-4");
    refused["p2p_read"] = json!("chipset_not_supported");
    refused["p2p_write"] = json!("chipset_not_supported");
    let (code, ev) = Node::new(&d).run(PCIE_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        !f.is_empty()
            && f.iter()
                .all(|f| f.0 == "virtualization" && f.2 == "GPU 3 - GPU 4"),
        "{f:#?}"
    );

    // The same box with an 8th GPU whose link trained at Gen3: topology fails naming it.
    let mut d = pcie_box();
    d["gpus"][7]["pcie"]["gen_max"] = json!(3);
    d["gpus"][7]["pcie"]["gen_current"] = json!(3);
    let (code, ev) = Node::new(&d).run(PCIE_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        !f.is_empty() && f.iter().all(|f| f.0 == "topology" && f.2 == "GPU 7"),
        "{f:#?}"
    );
}

#[test]
fn the_fabric_state_says_which_gpu_the_fabric_manager_did_not_register() {
    let mut d = hgx_h200();
    d["gpus"][2]["fabric"] = json!({"state": 1});
    d["gpus"][3]["fabric"] = json!({"state": 2});
    // Registration finished, with NVML_ERROR_UNKNOWN.
    d["gpus"][4]["fabric"] = json!({"state": 3, "status": 999});
    d["gpus"][5].as_object_mut().expect("gpu").remove("fabric");
    let inv = Node::new(&d).inventory();
    let fabric: Vec<Value> = (0..8)
        .map(|i| inv["gpus"][i]["nvls"]["fabric"].clone())
        .collect();
    assert_eq!(
        fabric,
        vec![
            json!("completed"),
            json!("completed"),
            json!("not_started"),
            json!("in_progress"),
            json!("failed"),
            Value::Null,
            json!("completed"),
            json!("completed"),
        ]
    );
    let notes = inv["unavailable"].to_string();
    assert!(
        notes.contains("gpu5 gpu fabric state: not supported"),
        "{notes}"
    );
}

#[test]
fn readings_nvml_does_not_answer_are_not_available_never_healthy() {
    let mut d = hgx_h200();
    let g = &mut d["gpus"][1];
    for key in [
        "ecc",
        "remapped_rows",
        "retired_pages",
        "temperature_c",
        "throttle_reasons",
        "xid_events",
    ] {
        g.as_object_mut().expect("gpu").remove(key);
    }
    g["pcie"]
        .as_object_mut()
        .expect("pcie")
        .remove("replay_counter");
    for l in g["nvlinks"].as_array_mut().expect("links") {
        l.as_object_mut().expect("link").remove("errors");
    }
    let node = Node::new(&d);
    let inv = node.inventory();
    let g1 = &inv["gpus"][1];
    assert_eq!(g1["remapped_rows"], Value::Null);
    assert_eq!(g1["temperature_c"], Value::Null);
    assert_eq!(g1["ecc"]["volatile_uncorrected"], Value::Null);
    assert_eq!(g1["nvlinks"][0]["errors"]["replay"], Value::Null);
    let notes = inv["unavailable"].to_string();
    for n in [
        "gpu1 remapped rows: not supported",
        "gpu1 temperature: not supported",
        "gpu1 throttle reasons: not supported",
        "gpu1 pcie replay counter: not supported",
        "gpu1 nvlink error counters: not reported",
        "gpu1 xid events: not supported",
    ] {
        assert!(notes.contains(n), "{n}: {notes}");
    }

    let (_, ev) = node.run(HGX_SUITE);
    let all = findings(&ev);
    let gpu1: Vec<_> = all
        .iter()
        .filter(|f| f.0 == "health" && f.2 == "GPU 1")
        .collect();
    // Each missing reading is a finding of its own, and none of them passes. (XIDs are left
    // out: the kernel log, this machine's, may still be a source for them.)
    for what in [
        "ECC error counts",
        "remapped rows",
        "PCIe replay counter",
        "NVLink error counters",
        "throttle reasons",
        "temperature",
    ] {
        let said: Vec<_> = gpu1.iter().filter(|f| f.3.contains(what)).collect();
        assert!(
            !said.is_empty(),
            "nothing said about {what} of GPU 1: {gpu1:#?}"
        );
        assert!(
            said.iter()
                .all(|f| f.1 != "pass" && f.3.starts_with("not available here: ")),
            "{what}: {said:#?}"
        );
    }
    let health = ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["kind"] == "health")
        .expect("health")
        .clone();
    // Partial coverage is said in the check's summary.
    let summary = health["summary"].as_str().unwrap_or("");
    assert!(summary.starts_with("partial: "), "{summary}");
    // GPU 0 answered everything: its readings pass.
    assert!(
        all.iter()
            .any(|f| f.0 == "health" && f.2 == "GPU 0" && f.1 == "pass"),
        "{all:#?}"
    );
}

#[test]
fn row_remapping_xids_and_a_gpu_lost_at_open_fail_health_naming_the_gpu() {
    let mut d = hgx_h200();
    d["gpus"][4]["remapped_rows"]["pending"] = json!(true);
    d["gpus"][5]["remapped_rows"]["failure"] = json!(true);
    d["gpus"][5]["remapped_rows"]["uncorrectable"] = json!(3);
    d["gpus"][2]["xid_events"] = json!([79]);
    let node = Node::new(&d);
    let inv = node.inventory();
    let xids = &inv["gpus"][2]["xids"];
    assert_eq!(xids[0]["code"], 79, "{xids}");
    assert_eq!(xids[0]["source"], "nvml event", "{xids}");
    assert_eq!(inv["gpus"][4]["remapped_rows"]["pending"], true);
    let (code, ev) = node.run(HGX_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    let failed = |gpu: &str, what: &str| {
        f.iter()
            .any(|x| x.0 == "health" && x.2 == gpu && x.3.to_lowercase().contains(what))
    };
    assert!(failed("GPU 2", "xid 79"), "{f:#?}");
    assert!(failed("GPU 4", "pending"), "{f:#?}");
    assert!(failed("GPU 5", "remap"), "{f:#?}");
    let named: std::collections::BTreeSet<&str> = f.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(named, ["GPU 2", "GPU 4", "GPU 5"].into(), "{f:#?}");

    // NVML counts 8 GPUs but cannot hand out the last one.
    let mut d = hgx_h200();
    d["gpus"][7]["lost"] = json!("at_open");
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        f.iter().any(|x| x.0 == "health"
            && x.2 == "NVML GPU 7"
            && x.3.contains("nvmlDeviceGetHandleByIndex(7)")),
        "{f:#?}"
    );
}

/// An XID a GPU raises once the run is under way (after the inventory read the events) is read
/// again after the next check that ran on the GPUs and filed under it: a fatal one fails the
/// run, and the health check, which judged the start, does not name it.
#[test]
fn an_xid_raised_during_the_run_is_filed_under_the_check_that_saw_it() {
    let mut d = hgx_h200();
    d["gpus"][3]["xid_events_later"] = json!([48]);
    let node = Node::new(&d);
    let suite = format!("{HGX_SUITE}\n[checks.host_bandwidth]\n");
    let (code, ev) = node.run(&suite);
    let all = findings(&ev);
    let during: Vec<_> = all
        .iter()
        .filter(|f| f.3.contains("raised while this check ran"))
        .collect();
    assert_eq!(during.len(), 1, "{all:#?}");
    assert_eq!(
        (
            during[0].0.as_str(),
            during[0].1.as_str(),
            during[0].2.as_str()
        ),
        ("host_bandwidth", "fail", "GPU 3")
    );
    assert!(
        during[0].3.starts_with("GPU 3: XID 48 (nvml event)"),
        "{during:#?}"
    );
    assert!(
        !all.iter()
            .any(|f| f.0 == "health" && f.3.to_lowercase().contains("xid 48")),
        "{all:#?}"
    );
    // The bandwidth could not be measured here (no CUDA), so the exit code says untestable;
    // the XID's failure is in the evidence all the same (above).
    assert_eq!(code, 3);
}

/// An XID raised after the last reading of a check (here no check runs on the GPUs, so after
/// the node was read) is read once more when the checks are done and filed under a record of its
/// own: the run fails, and the health check, which judged the start, does not name it. A node
/// that raised nothing gets no such record.
#[test]
fn an_xid_raised_after_the_last_reading_is_filed_by_the_closing_reading() {
    let mut d = hgx_h200();
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 0, "{:#?}", findings(&ev));
    assert!(!ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .any(|c| c["id"] == "after-checks"));

    d["gpus"][3]["xid_events_later"] = json!([79]);
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 1);
    assert_eq!(ev["verdict"], "fail");
    let checks = ev["checks"].as_array().expect("checks");
    let last = checks.last().expect("a record");
    assert_eq!(
        (&last["id"], &last["kind"], &last["status"]),
        (&json!("after-checks"), &json!("watch"), &json!("fail"))
    );
    assert_eq!(
        last["summary"],
        "GPU 3: XID 79 (nvml event) raised since the last reading, before the run ended, which \
         fails a node"
    );
    assert_eq!(last["findings"].as_array().expect("findings").len(), 1);
    assert!(
        !findings(&ev)
            .iter()
            .any(|f| f.0 == "health" && f.3.contains("XID 79")),
        "{:#?}",
        findings(&ev)
    );
}

/// A counter read when the node was read and not at the end of the run (here GPU 2's PCIe
/// replay counter stops answering) is not taken for nothing: the closing reading's record is
/// partial, so is the run (exit 7), and the evidence is of the version that says so.
#[test]
fn a_counter_that_stops_answering_by_the_end_makes_the_run_partial() {
    let mut d = hgx_h200();
    d["gpus"][2]["errors_later"] = json!({"errors": {"nvmlDeviceGetPcieReplayCounter": "unknown"}});
    let (code, ev) = Node::new(&d).run(HGX_SUITE);
    assert_eq!(code, 7, "{:#?}", findings(&ev));
    assert_eq!(ev["verdict"], "partial");
    assert_eq!(ev["format_version"], 7);
    let last = ev["checks"]
        .as_array()
        .expect("checks")
        .last()
        .expect("a record");
    assert_eq!(
        (&last["id"], &last["status"]),
        (&json!("after-checks"), &json!("skip"))
    );
    assert_eq!(
        last["summary"],
        "skipped: not available here: PCIe replay counter of GPU 2 at the end of the run (read \
         at the last reading): what was counted since is not judged"
    );
    assert_eq!(last["coverage"], json!({"available": 0, "total": 1}));
}

/// A GPU whose name or memory size NVML does not answer is not "unknown GPU" of 0 bytes failing
/// the suite's model and memory floor: both are not available here, the run is partial (exit 7),
/// not failed, and the evidence names `model` and `memory` (format 8).
#[test]
fn a_name_or_memory_size_nvml_does_not_answer_is_unknown_not_wrong() {
    let mut d = hgx_h200();
    d["gpus"][2]["errors"] = json!({"nvmlDeviceGetName": "unknown"});
    d["gpus"][5]["errors"] = json!({"nvmlDeviceGetMemoryInfo_v2": "unknown"});
    let node = Node::new(&d);
    let inv = node.inventory();
    assert_eq!(inv["gpus"][2]["unavailable"], json!(["model"]));
    assert_eq!(inv["gpus"][2]["name"], "unknown GPU");
    assert_eq!(inv["gpus"][5]["unavailable"], json!(["memory"]));
    assert_eq!(inv["gpus"][5]["memory_bytes"], 0);
    let (code, ev) = node.run(HGX_SUITE);
    assert_eq!(code, 7, "{:#?}", failures(&ev));
    assert_eq!(ev["verdict"], "partial");
    assert_eq!(ev["format_version"], 8);
    assert!(failures(&ev).is_empty(), "{:#?}", failures(&ev));
    let all = findings(&ev);
    for want in [
        "not available here: model name of GPU 2",
        "not available here: memory size of GPU 5",
    ] {
        assert!(
            all.iter()
                .any(|f| f.0 == "topology" && f.1 == "skip" && f.3 == want),
            "{want}: {all:#?}"
        );
    }
}

/// A GPU whose NVLink state NVML does not answer (an error that is not "no such link") is not
/// a GPU without NVLink: its pairs' link counts and the NVSwitch count are not available here,
/// the run is partial (exit 7), not failed as links down, and the evidence names `nvlink_state`
/// (format 7).
#[test]
fn a_link_state_nvml_does_not_answer_is_not_a_missing_link() {
    let mut d = hgx_h200();
    d["gpus"][2]["errors"] = json!({"nvmlDeviceGetNvLinkState": "unknown"});
    let node = Node::new(&d);
    let inv = node.inventory();
    assert_eq!(inv["gpus"][2]["unavailable"], json!(["nvlink_state"]));
    assert_eq!(inv["gpus"][2]["nvlinks"], json!([]));
    assert_eq!(
        inv["gpus"][3]["nvlinks"].as_array().expect("links").len(),
        18
    );
    assert_eq!(inv["nvswitches"], Value::Null);
    assert!(
        inv["unavailable"]
            .as_array()
            .expect("notes")
            .iter()
            .any(|n| n
                .as_str()
                .unwrap_or("")
                .starts_with("gpu2 nvlink 0: state not read")),
        "{:#?}",
        inv["unavailable"]
    );
    let (code, ev) = node.run(HGX_SUITE);
    assert_eq!(code, 7, "{:#?}", failures(&ev));
    assert_eq!(ev["verdict"], "partial");
    assert_eq!(ev["format_version"], 7);
    let all = findings(&ev);
    let topo: Vec<&(String, String, String, String)> = all
        .iter()
        .filter(|f| f.0 == "topology" && f.1 == "skip")
        .collect();
    // GPU 2's pairs with each of the 7 others, and the NVSwitch.
    assert_eq!(topo.len(), 8, "{topo:#?}");
    assert!(
        topo.iter().any(|f| f.3
            == "GPU 0 - GPU 2: not available here: the NVLink state of GPU 2 (the links between \
                them are not known)"),
        "{topo:#?}"
    );
    assert!(topo
        .iter()
        .any(|f| f.3 == "NVSwitch presence: not available here"));
    assert!(
        all.iter().any(|f| f.0 == "health"
            && f.1 == "skip"
            && f.3
                == "not available here: NVLink error counters of GPU 2 (its NVLink state could \
                    not be read, so not every link's counters were)"),
        "{all:#?}"
    );
    assert!(failures(&ev).is_empty(), "{:#?}", failures(&ev));
}

/// Hopper's links count data errors by ECC, not CRC: the counter is read (through the raw call
/// the wrapper lacks), recorded, and judged with the others; a link that answers it and not the
/// CRC one is read whole.
#[test]
fn nvlink_data_errors_counted_by_ecc_are_read_and_judged() {
    let mut d = hgx_h200();
    for g in [6, 7] {
        for l in d["gpus"][g]["nvlinks"].as_array_mut().expect("links") {
            l["errors"] = json!({"replay": 0, "recovery": 0, "crc_flit": 0, "ecc_data": 0});
        }
    }
    d["gpus"][6]["nvlinks"][2]["errors"]["ecc_data"] = json!(150);
    let node = Node::new(&d);
    let inv = node.inventory();
    assert_eq!(inv["gpus"][6]["nvlinks"][2]["errors"]["ecc_data"], 150);
    assert_eq!(
        inv["gpus"][6]["nvlinks"][2]["errors"]["crc_data"],
        Value::Null
    );
    let (_, ev) = node.run(HGX_SUITE);
    let all = findings(&ev);
    let nvlink = |gpu: &str| -> Vec<(String, String)> {
        all.iter()
            .filter(|f| f.0 == "health" && f.2.starts_with(gpu) && f.3.contains("NVLink"))
            .map(|f| (f.1.clone(), f.3.clone()))
            .collect()
    };
    assert_eq!(
        nvlink("GPU 6"),
        [(
            "fail".to_string(),
            "GPU 6 link 2: 150 NVLink errors (replay, recovery, flit CRC, data ECC)".to_string()
        )],
        "{all:#?}"
    );
    let g7 = nvlink("GPU 7");
    assert_eq!(g7.len(), 1, "{g7:#?}");
    assert_eq!(g7[0].0, "pass");
    assert!(!g7[0].1.contains("not read"), "{g7:#?}");
}

/// A GPU without row remapping answers NOT_SUPPORTED, and its retired pages are its reading; a
/// remap query that fails otherwise leaves the reading unread, whatever the retired pages say:
/// "not available here", never "none pending".
#[test]
fn a_remap_query_that_fails_is_not_stood_in_for_by_retired_pages() {
    let mut d = hgx_h200();
    d["gpus"][2]["errors"] = json!({"nvmlDeviceGetRemappedRows": "unknown"});
    d["gpus"][3]["errors"] = json!({"nvmlDeviceGetRemappedRows": "not_supported"});
    // NOT_SUPPORTED where the GPU has row remapping all the same: a Hopper GPU, or any GPU with
    // MIG on (NVML does not answer the remap then).
    d["gpus"][4]["errors"] = json!({"nvmlDeviceGetRemappedRows": "not_supported"});
    d["gpus"][4]["architecture"] = json!(9);
    d["gpus"][5]["errors"] = json!({"nvmlDeviceGetRemappedRows": "not_supported"});
    d["gpus"][5]["mig_mode"] = json!(1);
    // A Volta GPU answers NOT_SUPPORTED: it has no row remapping, its retired pages stand.
    d["gpus"][6]["errors"] = json!({"nvmlDeviceGetRemappedRows": "not_supported"});
    d["gpus"][6]["architecture"] = json!(5);
    let node = Node::new(&d);
    let (_, ev) = node.run(HGX_SUITE);
    let all = findings(&ev);
    let remap = |gpu: &str| -> Vec<(String, String)> {
        all.iter()
            .filter(|f| f.0 == "health" && f.2 == gpu && f.3.contains("remapped rows"))
            .map(|f| (f.1.clone(), f.3.clone()))
            .collect()
    };
    assert_eq!(
        remap("GPU 2"),
        [(
            "skip".to_string(),
            "not available here: remapped rows and retired pages of GPU 2".to_string()
        )],
        "{all:#?}"
    );
    for gpu in [3, 6] {
        assert_eq!(
            remap(&format!("GPU {gpu}")),
            [(
                "pass".to_string(),
                format!("GPU {gpu} remapped rows and retired pages: none pending or failed")
            )],
            "{all:#?}"
        );
    }
    for gpu in [4, 5] {
        assert_eq!(
            remap(&format!("GPU {gpu}")),
            [(
                "skip".to_string(),
                format!("not available here: remapped rows and retired pages of GPU {gpu}")
            )],
            "{all:#?}"
        );
    }
}

/// Counts a GPU raises once the run is under way (after the inventory read them) are read
/// again after the next check that ran on the GPUs and filed under it: an uncorrectable ECC
/// error, the row remap it leaves pending, and PCIe replays past the limit fail the run; the
/// health check, which judged the start, names none of them.
#[test]
fn errors_counted_during_the_run_are_filed_under_the_check_that_counted_them() {
    let mut d = hgx_h200();
    d["gpus"][5]["errors_later"] =
        json!({"volatile_uncorrected": 2, "pcie_replay_counter": 300, "remap_pending": true});
    let node = Node::new(&d);
    let suite = format!("{HGX_SUITE}\n[checks.host_bandwidth]\n");
    let (code, ev) = node.run(&suite);
    let all = findings(&ev);
    let during: Vec<(&str, &str, &str, &str)> = all
        .iter()
        .filter(|f| f.3.contains("while this check ran"))
        .map(|f| (f.0.as_str(), f.1.as_str(), f.2.as_str(), f.3.as_str()))
        .collect();
    assert_eq!(
        during,
        [
            (
                "host_bandwidth",
                "fail",
                "GPU 5",
                "GPU 5: uncorrectable ECC errors rose by 2 while this check ran, to 2, beyond the \
                 limit of 0"
            ),
            (
                "host_bandwidth",
                "fail",
                "GPU 5",
                "GPU 5: a row remap became pending (the GPU must be reset before use) while this \
                 check ran"
            ),
            (
                "host_bandwidth",
                "fail",
                "GPU 5",
                "GPU 5: PCIe replays rose by 300 while this check ran, to 300, beyond the limit of \
                 80"
            ),
        ],
        "{all:#?}"
    );
    assert!(
        !all.iter()
            .any(|f| f.0 == "health" && f.1 == "fail" && f.2 == "GPU 5"),
        "{all:#?}"
    );
    // No CUDA here: the bandwidth itself could not be measured, so the exit code says
    // untestable; the failures are in the evidence all the same (above).
    assert_eq!(code, 3);
}

/// An NVLink that NVML answers active when the node is read and inactive after a check went
/// down under load: that check fails naming the link, once; the health check, which judged the
/// start, does not.
#[test]
fn a_link_that_goes_down_during_the_run_fails_the_check_it_went_down_in() {
    let mut d = hgx_h200();
    d["gpus"][4]["errors_later"] = json!({"links_down": [3]});
    let node = Node::new(&d);
    let inv = node.inventory();
    assert_eq!(inv["gpus"][4]["nvlinks"][3]["active"], true);
    let suite = format!("{HGX_SUITE}\n[checks.host_bandwidth]\n[checks.p2p_bandwidth]\n");
    let (_, ev) = node.run(&suite);
    let all = findings(&ev);
    let down: Vec<(&str, &str, &str)> = all
        .iter()
        .filter(|f| f.3.contains("went down"))
        .map(|f| (f.0.as_str(), f.1.as_str(), f.3.as_str()))
        .collect();
    assert_eq!(
        down,
        [(
            "host_bandwidth",
            "fail",
            "GPU 4 link 3: NVLink went down while this check ran (it was active when last read)"
        )],
        "{all:#?}"
    );
    // Not "not available here" for its counters either, then or after.
    assert!(
        !all.iter()
            .any(|f| f.2.starts_with("GPU 4") && f.3.contains("link 3's")),
        "{all:#?}"
    );
}

/// Two H100 NVL bridge pairs (GPU 0-1 and 2-3, 12 links each, no NVSwitch). The first pair's
/// driver names the far end a GPU; the second's does not answer the remote type, and the far end
/// is recognised by its bus id.
#[test]
fn direct_nvlink_bridges_reach_their_gpu_by_type_or_by_bus_id() {
    let bus = [
        "00000000:17:00.0",
        "00000000:65:00.0",
        "00000000:CA:00.0",
        "00000000:E3:00.0",
    ];
    let gpus: Vec<Value> = (0..4)
        .map(|i| {
            let mut g = healthy_gpu(i, "NVIDIA H100 NVL", bus[i], 100_485_038_080, 0, "0-63");
            let peer = i ^ 1;
            g["nvlinks"] = (0..12)
                .map(|_| {
                    let mut l = json!({
                        "active": true, "version": 6, "remote_bus_id": bus[peer],
                        "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
                    });
                    if i < 2 {
                        l["remote_type"] = json!("gpu");
                    }
                    l
                })
                .collect();
            g
        })
        .collect();
    let d = json!({
        "driver_version": "550.127.05",
        "gpus": gpus,
        "pair_default": {"path": "NODE", "p2p_read": "ok", "p2p_write": "ok",
                         "p2p_nvlink": "not_supported", "p2p_atomics": "ok"},
        "pairs": [
            {"a": 0, "b": 1, "path": "NODE", "p2p_read": "ok", "p2p_write": "ok",
             "p2p_nvlink": "ok", "p2p_atomics": "ok"},
            {"a": 2, "b": 3, "path": "NODE", "p2p_read": "ok", "p2p_write": "ok",
             "p2p_nvlink": "ok", "p2p_atomics": "ok"},
        ],
    });
    let inv = Node::new(&d).inventory();
    assert_eq!(inv["nvswitches"], 0);
    for (i, g) in inv["gpus"].as_array().expect("gpus").iter().enumerate() {
        let l = &g["nvlinks"][0];
        assert_eq!(l["remote"]["kind"], "gpu", "GPU {i}: {l}");
        assert_eq!(l["remote"]["gpu"], i ^ 1, "GPU {i}: {l}");
    }
    for p in inv["pairs"].as_array().expect("pairs") {
        let bridged = (p["a"] == 0 && p["b"] == 1) || (p["a"] == 2 && p["b"] == 3);
        assert_eq!(p["nvlinks"], if bridged { 12 } else { 0 }, "{p}");
        assert_eq!(p["p2p"]["nvlink"], bridged, "{p}");
    }
    // The cuda driver version was not answered: a note, not a guess.
    assert_eq!(inv["cuda_driver_version"], Value::Null);
    assert!(inv["unavailable"]
        .to_string()
        .contains("node cuda driver version: not supported"));
}

/// NVML that loads but cannot test the node: exit 3, one sentence naming why, no panic.
#[test]
fn nvml_that_cannot_test_the_node_exits_3_saying_why() {
    let cases = [
        (
            json!({"errors": {"nvmlInit_v2": "driver_not_loaded"}, "gpus": [{}]}),
            "the NVIDIA kernel driver is not loaded",
        ),
        (
            json!({"errors": {"nvmlInit_v2": "no_permission"}, "gpus": [{}]}),
            "no permission",
        ),
        (json!({"gpus": []}), "reports no GPU"),
        (
            json!({"gpus": [{"lost": "at_open"}, {"lost": "at_open"}]}),
            "all 2 GPUs NVML lists fell off the bus",
        ),
        (
            json!({"errors": {"nvmlDeviceGetCount_v2": "unknown"}, "gpus": [{}]}),
            "nvmlDeviceGetCount failed",
        ),
    ];
    for (d, want) in cases {
        let node = Node::new(&d);
        let out = node
            .cmd()
            .args(["inventory", "--json"])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{d}: {stderr}");
        assert!(stderr.contains(want), "{d}: {stderr}");
        assert!(
            !stderr.contains("panicked") && out.stdout.is_empty(),
            "{stderr}"
        );
    }
}

/// NVML's virtualization mode decides the mode whatever this machine's own witnesses say: a vGPU
/// slice where the suite promised a passed-through GPU fails virtualization; passthrough passes.
#[test]
fn a_vgpu_where_passthrough_was_promised_fails_virtualization() {
    let node = |mode: &str| {
        let mut g = healthy_gpu(
            0,
            "NVIDIA H200",
            "00000000:00:06.0",
            150_754_820_096,
            0,
            "0-15",
        );
        g["virtualization_mode"] = json!(mode);
        Node::new(&json!({"driver_version": "580.159.04", "gpus": [g]}))
    };
    let virt = |ev: &Value| {
        findings(ev)
            .into_iter()
            .filter(|f| f.0 == "virtualization" && f.2 == "node")
            .map(|f| (f.1, f.3))
            .collect::<Vec<_>>()
    };
    let (_, ev) = node("vgpu").run_suite("h200-vm-1");
    assert_eq!(
        virt(&ev),
        [(
            "fail".to_string(),
            "vGPU where passthrough was promised: the GPUs are shared slices, not whole devices"
                .to_string()
        )]
    );
    let (_, ev) = node("passthrough").run_suite("h200-vm-1");
    let v = virt(&ev);
    assert!(v.len() == 1 && v[0].0 == "pass", "{v:?}");
}

/// An idle GPU lowers its PCIe link. Below its maximum at rest, the link is read again under
/// load through CUDA; with no CUDA GPU to load (none here) it is neither passed nor failed: a
/// warning says a downtrained link is not ruled out.
#[test]
fn a_link_below_its_maximum_at_rest_that_cannot_be_loaded_is_a_warning() {
    let mut d = pcie_box();
    d["gpus"][4]["pcie"]["gen_current"] = json!(1);
    let node = Node::new(&d);
    let inv = node.inventory();
    assert_eq!(inv["gpus"][4]["pcie"]["gen_loaded"], Value::Null);
    assert!(
        inv["unavailable"]
            .to_string()
            .contains("gpu4 pcie link under load: not read"),
        "{}",
        inv["unavailable"]
    );
    let (code, ev) = node.run(PCIE_SUITE);
    assert_eq!(failures(&ev), vec![], "{:#?}", findings(&ev));
    let warned: Vec<_> = findings(&ev)
        .into_iter()
        .filter(|f| f.1 == "warn")
        .collect();
    assert!(
        warned.len() == 1
            && warned[0].0 == "topology"
            && warned[0].2 == "GPU 4"
            && warned[0].3.contains("a downtrained link is not ruled out"),
        "{warned:#?}"
    );
    assert_eq!(code, 0, "a warning passes");
}

/// Which CPUs each GPU is local to, read through NVML's CPU affinity (issue 14 item 1): the
/// board's lists pass the suite that states them, literally and as a relation; a GPU that NVML
/// reports local to the other socket's CPUs fails, named with both lists; a GPU whose affinity
/// NVML does not answer is not available here, never a pass.
#[test]
fn each_gpus_cpus_are_read_through_nvml_and_judged() {
    let suite = format!(
        "{HGX_SUITE}cpu_affinity_groups = [[0, 1, 2, 3], [4, 5, 6, 7]]\n\
         cpu_affinity = [\"0-47,96-143\", \"0-47,96-143\", \"0-47,96-143\", \"0-47,96-143\", \
         \"48-95,144-191\", \"48-95,144-191\", \"48-95,144-191\", \"48-95,144-191\"]\n"
    );
    let cpu_findings = |ev: &Value| -> Vec<(String, String, String, String)> {
        findings(ev)
            .into_iter()
            .filter(|f| f.0 == "topology" && f.3.contains("CPU"))
            .collect()
    };
    let (code, ev) = Node::new(&hgx_h200()).run(&suite);
    let f = cpu_findings(&ev);
    assert_eq!(code, 0, "{:#?}", findings(&ev));
    assert_eq!(f.len(), 10, "{f:#?}");
    assert!(f.iter().all(|f| f.1 == "pass"), "{f:#?}");
    assert!(
        f.iter()
            .any(|f| f.3 == "GPU 5 is local to CPUs 48-95,144-191"),
        "{f:#?}"
    );

    let mut d = hgx_h200();
    d["gpus"][5]["cpu_affinity"] = json!("0-47,96-143");
    let (code, ev) = Node::new(&d).run(&suite);
    assert_eq!(code, 1);
    let f = failures(&ev);
    assert!(
        f.iter().any(|f| f.2 == "GPU 5"
            && f.3 == "GPU 5 is local to CPUs 0-47,96-143, expected CPUs 48-95,144-191"),
        "{f:#?}"
    );
    assert!(
        f.iter().all(|f| f.0 == "topology" && f.2.contains('5')),
        "{f:#?}"
    );

    // NVML does not answer GPU 2's affinity; where this machine has no PCI device at its bus
    // id, sysfs gives no local_cpulist either.
    if !host_has_pci(&HGX_BUS[2][4..].to_lowercase()) {
        let mut d = hgx_h200();
        d["gpus"][2]
            .as_object_mut()
            .expect("gpu")
            .remove("cpu_affinity");
        let (_, ev) = Node::new(&d).run(&suite);
        let f = cpu_findings(&ev);
        let gpu2: Vec<_> = f.iter().filter(|f| f.3.starts_with("GPU 2 ")).collect();
        assert!(
            !gpu2.is_empty() && gpu2.iter().all(|f| f.1 == "skip"),
            "{f:#?}"
        );
        assert!(
            gpu2.iter()
                .any(|f| f.3 == "GPU 2 CPU affinity: not available here"),
            "{f:#?}"
        );
        assert!(failures(&ev).is_empty(), "{:#?}", failures(&ev));
    }
}

/// An MPS control daemon where the driver would look for it (`CUDA_MPS_PIPE_DIRECTORY`, here a
/// Kubernetes-style folder) is found before anything opens the node, with its process, and
/// recorded in the inventory; the health check warns of it and the run still passes: nodecert
/// went around it. Where there is none, the inventory says where it looked.
#[test]
fn an_mps_daemon_is_found_recorded_and_warned_about() {
    let node = Node::new(&hgx_h200());
    let pipe = node.env.path("run/nvidia/mps/pipe");
    std::fs::create_dir_all(&pipe).expect("mkdir");
    let _socket = std::os::unix::net::UnixListener::bind(pipe.join("control")).expect("bind");
    // A process whose program is the daemon's name.
    let daemon = node.env.path("nvidia-cuda-mps-control");
    std::fs::copy("/bin/sleep", &daemon).expect("copy sleep");
    // A test beside this one may fork while the copy is open for writing: the kernel then
    // refuses to run it until that child has run its own program ("Text file busy"). The wait
    // was one second, the likeliest cause of one failure under load whose message was not kept.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut child = loop {
        match std::process::Command::new(&daemon).arg("60").spawn() {
            Err(e) if e.raw_os_error() == Some(26) && std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.expect("start the stand-in daemon"),
        }
    };
    let with_pipe = |mut c: assert_cmd::Command| {
        c.env("CUDA_MPS_PIPE_DIRECTORY", &pipe);
        c
    };
    let out = with_pipe(node.cmd())
        .args(["inventory", "--json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let mut mps = json!({"pipe_dir": pipe.to_str().unwrap(), "socket": true});
    // A host with a real daemon has two: which one listens at the folder is not known.
    if !std::path::Path::new("/usr/bin/nvidia-cuda-mps-control").exists() {
        mps["pid"] = json!(child.id());
        let text = with_pipe(node.cmd())
            .arg("inventory")
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&text.stdout).to_string();
        let line = format!(
            "  MPS: the MPS control daemon at {} (pid {}); nodecert goes around it",
            pipe.display(),
            child.id()
        );
        assert!(text.contains(&line), "{text}");
    }
    assert_eq!(v["inventory"]["mps"], mps);

    node.env.write("suite.toml", HGX_SUITE);
    let out = with_pipe(node.cmd())
        .args(["run", "suite.toml", "--quiet", "--out", "report"])
        .output()
        .expect("runs");
    let _ = child.kill();
    let _ = child.wait();
    let ev: Value =
        serde_json::from_slice(&std::fs::read(node.env.path("report/evidence.json")).unwrap())
            .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:#?}", findings(&ev));
    let warned: Vec<_> = findings(&ev)
        .into_iter()
        .filter(|f| f.1 == "warn")
        .collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_eq!(
        (warned[0].0.as_str(), warned[0].2.as_str()),
        ("health", "node")
    );
    assert!(warned[0].3.contains("nodecert's own work goes around it"));
    // Without the variable, the driver would look in /tmp/nvidia-mps.
    if !std::path::Path::new("/tmp/nvidia-mps/control").exists() {
        assert_eq!(
            node.inventory()["mps"],
            json!({"pipe_dir": "/tmp/nvidia-mps", "socket": false})
        );
    }
}
