//! The real capture of an H200 passed through to a Firecracker VM (tests/fixtures/
//! h200-firecracker-1gpu): its NVML answers (probe.json) become a description for the fake NVML
//! (fake-nvml), and the product reads them through its own NVML code, as it reads a real node
//! (`nodecert inventory`, `nodecert run`, no `--simulate`). A change in the real reading shows
//! up here.
//!
//! What the platform reads outside NVML (sysfs, CPUID, DMI, the kernel log) is this machine's,
//! not the capture's: those parts are asserted only where NVML decides them.

mod util;

use serde_json::{json, Value};
use std::path::Path;
use util::{fake_nvml::use_fake, Env};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/h200-firecracker-1gpu"
);

fn probe() -> Value {
    let text = std::fs::read_to_string(Path::new(DIR).join("probe.json")).expect("probe.json");
    serde_json::from_str(&text).expect("json")
}

/// An answer of the capture, or None where NVML answered with an error ("error": ...).
fn answered(v: &Value) -> Option<&Value> {
    (!v.is_null() && v.get("error").is_none()).then_some(v)
}

/// "13.0" -> 13000, as nvmlSystemGetCudaDriverVersion_v2 answers.
fn cuda_version(text: &str) -> Value {
    let (major, minor) = text.split_once('.').expect("major.minor");
    json!(major.parse::<i32>().expect("major") * 1000 + minor.parse::<i32>().expect("minor") * 10)
}

/// "ThrottleReasons(0x0)" -> 0.
fn throttle_bits(v: &Value) -> Value {
    let text = v.as_str().expect("throttle reasons");
    let hex = text
        .trim_start_matches("ThrottleReasons(0x")
        .trim_end_matches(')');
    json!(u64::from_str_radix(hex, 16).expect("hex"))
}

/// The capture's ECC counters, with the SRAM ones that the probe did not ask for: nodecert's
/// own run on the same kind of machine (tests/fixtures/h200-nodecert-run, 2026-12-04) read them
/// there, 0 and 0, and NVML answered. Left out, the fake would answer NOT_SUPPORTED, a reading
/// the real H200 does not give.
fn sram_answered(ecc: &Value) -> Value {
    let mut ecc = ecc.clone();
    let run = Path::new(DIR).join("../h200-nodecert-run/inventory-json.out");
    let text = std::fs::read_to_string(run).expect("the run's inventory");
    let inv: Value = serde_json::from_str(&text).expect("json");
    let seen = &inv["inventory"]["gpus"][0]["ecc"];
    for key in ["sram_corrected", "sram_uncorrected"] {
        assert!(seen[key].is_u64(), "{key} read on the H200: {seen}");
        ecc[key] = seen[key].clone();
    }
    ecc
}

/// The fake's description of the captured node: every answer the capture holds, and nothing
/// else (a reading the capture did not record answers NOT_SUPPORTED).
fn description(p: &Value) -> Value {
    let nv = &p["nvml"];
    let gpus: Vec<Value> = nv["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| {
            let mut g = json!({
                "name": d["name"],
                "uuid": d["uuid"],
                "pci_bus_id": d["pci_bus_id"],
                "pci_device_id": u32::from_str_radix(
                    d["pci_device_id"].as_str().expect("id").trim_start_matches("0x"), 16
                ).expect("hex id"),
                "memory_total_bytes": d["memory_total_bytes"],
                "persistence_mode": d["persistence_mode"],
                "mig_mode": d["mig_mode"]["current"],
                "ecc_mode": d["ecc_mode"]["current"],
                "ecc": sram_answered(&d["ecc_errors"]),
                "remapped_rows": d["remapped_rows_raw"],
                "temperature_c": d["temperature_c"],
                "sm_clock_mhz": d["clocks_mhz"]["sm"],
                "sm_clock_max_mhz": d["clocks_mhz"]["sm_max"],
                "throttle_reasons": throttle_bits(&d["throttle_reasons"]),
                "pcie": {
                    "gen_current": d["pcie"]["gen_current"],
                    "gen_max": d["pcie"]["gen_max"],
                    "width_current": d["pcie"]["width_current"],
                    "width_max": d["pcie"]["width_max"],
                    "replay_counter": d["pcie"]["replay_counter"],
                },
                "cpu_affinity": d["cpu_affinity"],
                "virtualization_mode": match d["virtualization_mode"].as_str() {
                    Some("PassThrough") => "passthrough",
                    Some("Bare") | Some("None") => "none",
                    Some("Vgpu") => "vgpu",
                    other => panic!("virtualization mode {other:?}"),
                },
                // An H200 reports XID events; the capture saw none (its dmesg has no XID).
                "xid_events": [],
                // The capture's "nvlinks": [] is NVML's NOT_SUPPORTED for link 0.
                "nvlinks": [],
            });
            if let Some(n) = answered(&d["numa_node_nvml"]) {
                g["numa_node"] = n.clone();
            }
            let r = &d["retired_pages"];
            if let (Some(s), Some(b), Some(pending)) = (
                answered(&r["sbe"]),
                answered(&r["dbe"]),
                answered(&r["pending"]),
            ) {
                g["retired_pages"] = json!({
                    "single_bit": s.as_array().map_or(0, Vec::len),
                    "double_bit": b.as_array().map_or(0, Vec::len),
                    "pending": pending,
                });
            }
            g
        })
        .collect();
    json!({
        "driver_version": nv["driver_version"],
        "cuda_driver_version": cuda_version(nv["cuda_driver_version"].as_str().expect("cuda")),
        "nvml_version": nv["nvml_version"],
        "gpus": gpus,
    })
}

/// A temp dir holding the capture's description, and nodecert commands that read it.
fn captured() -> Env {
    let env = Env::new();
    env.write("node.json", &description(&probe()).to_string());
    env
}

fn nodecert(env: &Env) -> assert_cmd::Command {
    let mut c = env.cmd();
    use_fake(&mut c, &env.path("node.json"));
    c
}

fn notes(inv: &Value) -> Vec<&str> {
    inv["unavailable"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn the_capture_reads_as_a_healthy_h200_passthrough_vm() {
    let env = captured();
    let out = nodecert(&env)
        .args(["inventory", "--json"])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["simulated"], false);
    let inv = &v["inventory"];
    assert_eq!(inv["driver_version"], "580.159.04");
    assert_eq!(inv["cuda_driver_version"], "13.0");
    assert_eq!(inv["nvml_version"], "13.580.159.04");
    assert_eq!(inv["gpus"].as_array().map(Vec::len), Some(1));
    let g = &inv["gpus"][0];
    assert_eq!(g["name"], "NVIDIA H200");
    assert_eq!(g["uuid"], "GPU-b5828672-933a-0638-cadd-d75fdbc9c2eb");
    assert_eq!(g["pci_bus_id"], "0000:00:06.0");
    assert_eq!(g["memory_bytes"], 150_754_820_096_u64);
    let pcie = &g["pcie"];
    assert_eq!(
        (&pcie["gen_current"], &pcie["width_current"]),
        (&json!(5), &json!(16))
    );
    assert_eq!(
        pcie["gen_loaded"],
        Value::Null,
        "Gen5 x16 at rest: no load needed"
    );
    assert_eq!(pcie["replay_counter"], 2);
    assert_eq!(g["ecc_enabled"], true);
    assert_eq!(g["ecc"]["volatile_uncorrected"], 0);
    assert_eq!(g["ecc"]["sram_uncorrected"], 0, "as the H200 answered");
    assert_eq!(g["ecc"]["sram_corrected"], 0);
    assert_eq!(g["throttle_reasons"], json!([]));
    assert_eq!(g["cpu_affinity"], "0-15");
    assert_eq!(g["sm_clock_max_mhz"], 1980);
    assert_eq!(g["temperature_c"], 39.0);
    assert_eq!(g["mig_enabled"], false);
    assert_eq!(g["persistence_mode"], true);
    let rows = &g["remapped_rows"];
    assert_eq!(
        rows,
        &json!({"correctable": 0, "uncorrectable": 0, "pending": false, "failure": false})
    );
    assert_eq!(g["retired_pages"], Value::Null);
    assert_eq!(g["nvlinks"], json!([]));
    assert_eq!(inv["pairs"], json!([]));
    assert_eq!(inv["nvswitches"], 0);
    // NVML says passthrough: whatever this machine's own witnesses say, the mode follows it.
    assert_eq!(inv["virtualization"]["mode"], "passthrough");
    assert_eq!(
        inv["virtualization"]["witnesses"][0],
        json!({"source": "nvml virtualization mode", "finding": "PassThrough"})
    );
    let notes = notes(inv);
    for note in [
        "gpu0 retired pages: not supported",
        "gpu0 nvlink: not supported (no NVLink)",
    ] {
        assert!(notes.contains(&note), "{note}: {notes:?}");
    }
    assert!(
        !notes.iter().any(|n| n.contains("sram")),
        "the H200 answers its SRAM counters: {notes:?}"
    );
    if !Path::new("/sys/bus/pci/devices/0000:00:06.0").exists() {
        // NVML did not answer the NUMA node, and this machine's sysfs has no such device.
        assert_eq!(g["numa_node"], Value::Null);
        assert!(notes.contains(&"gpu0 numa node: not reported"), "{notes:?}");
    }
}

/// `nodecert run SUITE` on the capture: exit code and evidence.
fn run(env: &Env, suite: &str) -> (i32, Value) {
    let out = nodecert(env)
        .args(["run", suite, "--quiet", "--out", "report"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let ev = util::read_json(&env.path("report/evidence.json"));
    (out.status.code().expect("exit code"), ev)
}

/// Status and reasons of each check, by kind.
fn checks(ev: &Value) -> Vec<(String, String, Vec<String>)> {
    ev["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            let reasons = c["findings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["reason"].as_str().map(String::from))
                .collect();
            (
                c["kind"].as_str().unwrap_or("").to_string(),
                c["status"].as_str().unwrap_or("").to_string(),
                reasons,
            )
        })
        .collect()
}

#[test]
fn the_capture_passes_the_nvml_checks_of_the_h200_vm_suite() {
    let env = captured();
    let (code, ev) = run(&env, "h200-vm-1");
    let checks = checks(&ev);
    let nvml_checks: Vec<_> = checks
        .iter()
        .filter(|c| matches!(c.0.as_str(), "topology" | "virtualization" | "health"))
        .collect();
    assert_eq!(nvml_checks.len(), 3, "{checks:#?}");
    for (kind, status, reasons) in &nvml_checks {
        assert_eq!(status, "pass", "{kind}: {reasons:#?}");
    }
    let reasons: Vec<&str> = nvml_checks
        .iter()
        .flat_map(|c| c.2.iter().map(String::as_str))
        .collect();
    for want in [
        "GPU 0 is an NVIDIA H200",
        "GPU 0 PCIe link Gen5 x16",
        "no NVSwitch, as expected",
        "driver 580.159.04",
    ] {
        assert!(reasons.contains(&want), "{want}: {reasons:#?}");
    }
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("the node runs as passthrough VM")),
        "{reasons:#?}"
    );
    // The measurements need CUDA: on a machine without a GPU they are errors, and the node
    // could not be tested (exit 3); on one with a GPU the fake's GPU is not CUDA's.
    if Path::new("/dev/nvidia0").exists() {
        return;
    }
    for (kind, status, reasons) in &checks {
        if !matches!(
            kind.as_str(),
            "topology" | "virtualization" | "health" | "p2p_bandwidth" | "network"
        ) {
            assert_eq!(status, "error", "{kind}: {reasons:#?}");
        }
    }
    assert_eq!(code, 3);
}

#[test]
fn the_capture_passes_its_own_frozen_suite() {
    let env = captured();
    let out = nodecert(&env)
        .args(["inventory", "--as-suite", "frozen.toml"])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frozen = env.read("frozen.toml");
    assert!(frozen.contains("memory_gib_min = 139.0"), "{frozen}");
    let (_, ev) = run(&env, "frozen.toml");
    for (kind, status, reasons) in checks(&ev) {
        if matches!(kind.as_str(), "topology" | "virtualization" | "health") {
            assert_eq!(status, "pass", "{kind}: {reasons:#?}");
        }
    }
}
