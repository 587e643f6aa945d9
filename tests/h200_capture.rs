//! The real capture of an H200 passed through to a Firecracker VM (tests/fixtures/
//! h200-firecracker-1gpu), mapped into an Inventory the way the real backend fills one, and
//! judged by the topology, virtualization and health checks of the embedded suite h200-vm-1.

use nodecert::backend::real::{nvml, order, xid};
use nodecert::checks::{self, Ctx, Measured};
use nodecert::evidence::Status;
use nodecert::inventory::{
    normalize_bus_id, EccCounts, Gpu, Inventory, PcieLink, RemappedRows, RetiredPages, VirtMode,
};
use nodecert::platform::{self, hypervisor::Cpuid, NvmlVirt};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use serde_json::Value;
use std::path::Path;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/h200-firecracker-1gpu"
);

fn read(name: &str) -> String {
    std::fs::read_to_string(Path::new(DIR).join(name)).expect("fixture")
}

/// The lines of one "## name" section of facts.txt.
fn section<'a>(facts: &'a str, name: &str) -> Vec<&'a str> {
    let head = format!("## {name}");
    facts
        .lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect()
}

fn u64_at(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn u32_at(v: &Value, key: &str) -> Option<u32> {
    u64_at(v, key).and_then(|x| u32::try_from(x).ok())
}

/// An NVML answer, or None and a note as the real backend writes it.
fn answered<'a>(v: &'a Value, who: &str, what: &str, notes: &mut Vec<String>) -> Option<&'a Value> {
    let unanswered = |x: &Value| x.get("error").is_some() || x.is_null();
    match v {
        x if unanswered(x) => None,
        Value::Object(m) if m.values().any(unanswered) => None,
        x => Some(x),
    }
    .or_else(|| {
        notes.push(format!("{who} {what}: not supported"));
        None
    })
}

/// "ThrottleReasons(0x0)" -> names.
fn throttle(v: &Value) -> Vec<String> {
    let text = v.as_str().unwrap_or("");
    let hex = text
        .trim_start_matches("ThrottleReasons(0x")
        .trim_end_matches(')');
    let bits = u64::from_str_radix(hex, 16).unwrap_or(0);
    nvml::throttle_names(ThrottleReasons::from_bits_truncate(bits))
}

fn gpu_from(index: usize, d: &Value, sysfs: &Path, notes: &mut Vec<String>) -> Gpu {
    let who = format!("gpu{index}");
    let pcie = &d["pcie"];
    let ecc = &d["ecc_errors"];
    let bus = normalize_bus_id(d["pci_bus_id"].as_str().unwrap_or(""));
    let numa = answered(&d["numa_node_nvml"], &who, "numa node (nvml)", notes)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .or_else(|| platform::pci::numa_node(sysfs, &bus));
    if numa.is_none() {
        notes.push(format!("{who} numa node: not reported"));
    }
    let retired =
        answered(&d["retired_pages"], &who, "retired pages", notes).map(|r| RetiredPages {
            single_bit: r["sbe"].as_array().map_or(0, |a| a.len() as u64),
            double_bit: r["dbe"].as_array().map_or(0, |a| a.len() as u64),
            pending: r["pending"].as_bool().unwrap_or(true),
        });
    let rows = &d["remapped_rows_raw"];
    let clocks = &d["clocks_mhz"];
    Gpu {
        index,
        name: d["name"].as_str().unwrap_or("").into(),
        uuid: d["uuid"].as_str().unwrap_or("").into(),
        serial: None,
        vbios: None,
        pci_bus_id: bus,
        memory_bytes: u64_at(d, "memory_total_bytes").unwrap_or(0),
        pcie: PcieLink {
            gen_current: u32_at(pcie, "gen_current"),
            gen_max: u32_at(pcie, "gen_max"),
            width_current: u32_at(pcie, "width_current"),
            width_max: u32_at(pcie, "width_max"),
            // The capture read the link at rest only; it was already at its maximum.
            gen_loaded: None,
            width_loaded: None,
            replay_counter: u64_at(pcie, "replay_counter"),
        },
        numa_node: numa,
        cpu_affinity: d["cpu_affinity"].as_str().map(String::from),
        cpu_socket: None,
        persistence_mode: d["persistence_mode"].as_bool(),
        mig_enabled: u64_at(&d["mig_mode"], "current").map(|m| m == 1),
        ecc_enabled: d["ecc_mode"]["current"].as_bool(),
        ecc: EccCounts {
            volatile_corrected: u64_at(ecc, "volatile_corrected"),
            volatile_uncorrected: u64_at(ecc, "volatile_uncorrected"),
            aggregate_corrected: u64_at(ecc, "aggregate_corrected"),
            aggregate_uncorrected: u64_at(ecc, "aggregate_uncorrected"),
            ..Default::default()
        },
        remapped_rows: Some(RemappedRows {
            correctable: u64_at(rows, "correctable").unwrap_or(0),
            uncorrectable: u64_at(rows, "uncorrectable").unwrap_or(0),
            pending: rows["pending"].as_bool().unwrap_or(true),
            failure: rows["failure"].as_bool().unwrap_or(true),
        }),
        retired_pages: retired,
        throttle_reasons: throttle(&d["throttle_reasons"]),
        sm_clock_mhz: u32_at(clocks, "sm"),
        sm_clock_max_mhz: u32_at(clocks, "sm_max"),
        power_limit_w: None,
        temperature_c: d["temperature_c"].as_f64(),
        nvlinks: vec![],
        xids: vec![],
        unavailable: vec![],
    }
}

/// A sample /proc and /sys tree holding what facts.txt saw in the guest.
fn guest_tree(facts: &str, dir: &Path) {
    let virt = section(facts, "virt");
    let flag = virt.iter().any(|l| l.trim() == "hypervisor");
    let model = virt
        .iter()
        .find(|l| l.starts_with("model name"))
        .copied()
        .unwrap_or("model name\t: unknown");
    let cpuinfo = format!(
        "processor\t: 0\n{model}\nflags\t\t: fpu sse2 {}avx512f\n",
        if flag { "hypervisor " } else { "" }
    );
    std::fs::create_dir_all(dir.join("proc")).expect("mkdir");
    std::fs::write(dir.join("proc/cpuinfo"), cpuinfo).expect("write");
    // facts.txt: no DMI files, no /sys/hypervisor, "iommu groups: 0", numa=-1.
    assert!(virt.iter().any(|l| l.contains("dmi sys_vendor: cat:")));
    std::fs::create_dir_all(dir.join("sys/kernel")).expect("mkdir");
    for l in section(facts, "pci") {
        let Some(rest) = l.strip_prefix("/sys/bus/pci/devices/") else {
            continue;
        };
        let bus = rest.split_whitespace().next().unwrap_or("");
        let numa = rest
            .split_whitespace()
            .find_map(|w| w.strip_prefix("numa="))
            .unwrap_or("-1");
        let dev = dir.join("sys/bus/pci/devices").join(bus);
        std::fs::create_dir_all(&dev).expect("mkdir");
        std::fs::write(dev.join("numa_node"), format!("{numa}\n")).expect("write");
    }
}

/// The capture as an Inventory, filled the way the real backend fills one.
fn inventory_from_capture(sysfs: &Path) -> Inventory {
    let probe: Value = serde_json::from_str(&read("probe.json")).expect("probe.json");
    let facts = read("facts.txt");
    guest_tree(&facts, sysfs);
    let nv = &probe["nvml"];
    let devices = nv["devices"].as_array().cloned().unwrap_or_default();
    let ids: Vec<order::NvmlId> = devices
        .iter()
        .map(|d| order::NvmlId {
            uuid: d["uuid"].as_str().unwrap_or("").into(),
            bus_id: normalize_bus_id(d["pci_bus_id"].as_str().unwrap_or("")),
        })
        .collect();
    let cuda = order::CudaView::Devices(
        probe["cuda"]["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| order::CudaDevice {
                ordinal: c["ordinal"].as_u64().unwrap_or(0) as usize,
                uuid: c["uuid"].as_str().map(String::from),
                bus_id: c["pci_bus_id"].as_str().map(String::from),
            })
            .collect(),
    );
    let o = order::order(&ids, &cuda, None);
    let mut notes = o.notes;
    let mut gpus: Vec<Gpu> = o
        .nvml_indices
        .iter()
        .enumerate()
        .map(|(i, &j)| gpu_from(i, &devices[j], sysfs, &mut notes))
        .collect();
    for (g, d) in gpus.iter().zip(&devices) {
        if d["nvlinks"].as_array().is_some_and(Vec::is_empty) {
            notes.push(format!("gpu{} nvlink: not supported (no NVLink)", g.index));
        }
    }
    let dmesg = section(&facts, "dmesg").join("\n");
    notes.extend(xid::attach(&mut gpus, &xid::parse_kernel_log(&dmesg), None));
    let nvml_mode = match devices
        .first()
        .and_then(|d| d["virtualization_mode"].as_str())
    {
        Some("PassThrough") => Some(NvmlVirt::PassThrough),
        Some("Bare") => Some(NvmlVirt::Bare),
        Some("Vgpu") => Some(NvmlVirt::Vgpu),
        _ => None,
    };
    let buses: Vec<String> = gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
    // CPUID was not captured: only the cpuinfo flag witnesses the hypervisor.
    let (virtualization, vnotes) =
        platform::virtualization(sysfs, &Cpuid::NotAvailable, nvml_mode, &buses);
    notes.extend(vnotes);
    Inventory {
        hostname: section(&facts, "uname")
            .first()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("unknown")
            .into(),
        driver_version: nv["driver_version"].as_str().map(String::from),
        cuda_driver_version: nv["cuda_driver_version"].as_str().map(String::from),
        nvml_version: nv["nvml_version"].as_str().map(String::from),
        gpus,
        pairs: vec![],
        nvswitches: Some(0),
        virtualization,
        unavailable: notes,
        lost_gpus: vec![],
    }
}

fn judged(
    inv: &Inventory,
    loaded: &nodecert::suite::load::LoadedSuite,
) -> Vec<(String, nodecert::evidence::Finding)> {
    let ctx = Ctx {
        suite: &loaded.suite,
        inventory: inv,
        earlier: &[],
        simulated: false,
    };
    checks::from_suite(loaded)
        .iter()
        .filter(|c| matches!(c.kind(), "topology" | "virtualization" | "health"))
        .flat_map(|c| {
            c.evaluate(&ctx, &Measured::default())
                .into_iter()
                .map(move |f| (c.id(), f))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_capture_reads_as_a_healthy_h200_passthrough_vm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let inv = inventory_from_capture(dir.path());
    assert_eq!(inv.hostname, "vm");
    assert_eq!(inv.driver_version.as_deref(), Some("580.159.04"));
    assert_eq!(inv.gpus.len(), 1);
    let g = &inv.gpus[0];
    assert_eq!(g.name, "NVIDIA H200");
    assert_eq!(g.uuid, "GPU-b5828672-933a-0638-cadd-d75fdbc9c2eb");
    assert_eq!(g.pci_bus_id, "0000:00:06.0");
    assert_eq!(
        (g.pcie.gen_current, g.pcie.width_current),
        (Some(5), Some(16))
    );
    let link = g.pcie.trained().expect("a PCIe reading");
    assert!(
        link.certain,
        "Gen5 x16 at rest is the maximum: no load needed"
    );
    assert_eq!(g.ecc_enabled, Some(true));
    assert_eq!(g.numa_node, None, "-1 in sysfs means not reported");
    assert!(g.throttle_reasons.is_empty());
    assert!(g.xids.is_empty());
    let rows = g.remapped_rows.as_ref().expect("remapped rows answered");
    assert!(!rows.pending && !rows.failure && rows.correctable == 0 && rows.uncorrectable == 0);
    assert!(g.nvlinks.is_empty() && inv.pairs.is_empty() && inv.nvswitches == Some(0));
    assert_eq!(inv.virtualization.mode, VirtMode::Passthrough);
    assert_eq!(
        inv.virtualization.hypervisor.as_deref(),
        Some("unidentified hypervisor")
    );
    assert_eq!(inv.virtualization.iommu_groups, Some(0));
    for note in [
        "gpu0 retired pages: not supported",
        "gpu0 numa node: not reported",
        "gpu0 nvlink: not supported (no NVLink)",
    ] {
        assert!(
            inv.unavailable.iter().any(|u| u == note),
            "{note}: {:?}",
            inv.unavailable
        );
    }
}

#[test]
fn the_capture_passes_the_h200_vm_suite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let inv = inventory_from_capture(dir.path());
    let loaded = nodecert::suite::load::load("h200-vm-1").expect("embedded suite");
    let findings = judged(&inv, &loaded);
    for (check, f) in &findings {
        assert!(
            matches!(f.status, Status::Pass | Status::Skip),
            "{check}: {f:?}"
        );
    }
    let reasons: Vec<&str> = findings.iter().map(|(_, f)| f.reason.as_str()).collect();
    for want in [
        "GPU 0 is an NVIDIA H200",
        "GPU 0 PCIe link Gen5 x16",
        "the node runs as passthrough VM (unidentified hypervisor)",
        "no NVSwitch, as expected",
        "driver 580.159.04",
    ] {
        assert!(reasons.contains(&want), "{want}: {reasons:?}");
    }
}

#[test]
fn the_capture_passes_its_own_frozen_suite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let inv = inventory_from_capture(dir.path());
    let text = nodecert::suite::freeze::suite_from_inventory(&inv, false);
    let loaded = nodecert::suite::load::load_source(nodecert::config::Source {
        name: "frozen.toml".into(),
        text: text.clone(),
    })
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(loaded.suite.node.memory_gib_min, Some(139.0));
    for (check, f) in judged(&inv, &loaded) {
        assert!(
            matches!(f.status, Status::Pass | Status::Skip),
            "{check}: {f:?}"
        );
    }
}
