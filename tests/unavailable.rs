//! Unknown is never healthy: a simulated node that does not give a reading, as VMs often do not,
//! gets a "not available here" finding for it, never a "within limits" claim, and a check that
//! missed readings says it is partial.

use nodecert::backend::sim::EMBEDDED;
use nodecert::evidence::{Evidence, Status};

/// `node`'s shipped description with `extra` appended, written to a temp file.
fn node_file(dir: &tempfile::TempDir, node: &str, extra: &str) -> String {
    let text = EMBEDDED.iter().find(|(n, _)| *n == node).unwrap().1;
    let p = dir.path().join(format!("{node}-hidden.toml"));
    std::fs::write(&p, format!("{text}\n{extra}\n")).unwrap();
    p.to_string_lossy().into_owned()
}

fn run(suite: &str, node: &str, extra: &str) -> Evidence {
    let dir = tempfile::tempdir().unwrap();
    let path = node_file(&dir, node, extra);
    nodecert::runner::simulate(suite, &path, &[], 1).unwrap()
}

const EVERY_GPU_READING: &str = r#"[[unavailable]]
readings = ["ecc_mode", "ecc_errors", "remapped_rows", "xids", "pcie_replays", "nvlink_errors", "throttle_reasons", "temperature", "processes"]
"#;

#[test]
fn a_vm_that_hides_every_health_counter_gets_no_within_limits_claim() {
    let ev = run("h200-vm-1", "h200-vm-1", EVERY_GPU_READING);
    let h = ev.check("health").unwrap();
    for f in h
        .findings
        .iter()
        .filter(|f| f.subject.describe() == "GPU 0")
    {
        assert_eq!(f.status, Status::Skip, "{f:?}");
        assert!(f.reason.starts_with("not available here: "), "{}", f.reason);
    }
    assert!(
        h.findings
            .iter()
            .all(|f| !f.reason.contains("within limits")),
        "{:?}",
        h.findings
    );
    for what in [
        "ECC mode",
        "ECC error counts",
        "remapped rows and retired pages",
        "XID events",
        "PCIe replay counter",
        "throttle reasons",
        "temperature",
        "processes",
    ] {
        let want = format!("not available here: {what} of GPU 0");
        assert!(h.findings.iter().any(|f| f.reason == want), "no '{want}'");
    }
    // Only the driver version was read: a partial pass, not a plain one.
    assert_eq!(h.status, Status::Pass);
    assert!(h.partial());
    let cov = h.coverage.unwrap();
    assert_eq!((cov.available, cov.total), (1, 9));
    assert_eq!(
        h.summary,
        "partial: 1 of 9 readings available; 1 of 1 judgements within limits"
    );
}

#[test]
fn hiding_the_driver_version_too_leaves_nothing_judged() {
    let extra = format!("{EVERY_GPU_READING}\n[[unavailable]]\nreadings = [\"driver_version\"]\n");
    let ev = run("h200-vm-1", "h200-vm-1", &extra);
    let h = ev.check("health").unwrap();
    assert_eq!(h.status, Status::Skip, "{}", h.summary);
    assert!(
        h.summary.starts_with("skipped: not available here: "),
        "{}",
        h.summary
    );
    assert!(ev.node.driver_version.is_none());
}

#[test]
fn nvlink_counters_hidden_on_one_gpu_are_named_and_make_the_check_partial() {
    let ev = run(
        "h100-sxm-8",
        "h100-sxm-8",
        "[[unavailable]]\nreadings = [\"nvlink_errors\"]\ngpus = [3]\n",
    );
    let h = ev.check("health").unwrap();
    let on: Vec<_> = h
        .findings
        .iter()
        .filter(|f| f.metric.as_deref() == Some("nvlink_errors"))
        .collect();
    assert_eq!(on.len(), 8);
    for f in on {
        if f.subject.describe() == "GPU 3" {
            assert_eq!(f.status, Status::Skip);
            assert_eq!(
                f.reason,
                "not available here: NVLink error counters of GPU 3"
            );
        } else {
            assert_eq!(f.status, Status::Pass, "{f:?}");
        }
    }
    assert_eq!(h.status, Status::Pass);
    assert!(h.partial());
    assert!(
        h.summary
            .starts_with("partial: 73 of 74 readings available"),
        "{}",
        h.summary
    );
    // The inventory says so too.
    assert!(ev
        .node
        .unavailable
        .iter()
        .any(|u| u == "gpu3 NVLink error counters: not available (hidden by the simulated node)"));
}

#[test]
fn a_hidden_reading_hides_its_fault_too_and_does_not_pass_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = node_file(
        &dir,
        "h100-sxm-8",
        "[[unavailable]]\nreadings = [\"throttle_reasons\", \"xids\"]\n",
    );
    let ev = nodecert::runner::simulate(
        "h100-sxm-8",
        &path,
        &["thermal-throttle:gpu=2", "xid:gpu=2"],
        1,
    )
    .unwrap();
    let h = ev.check("health").unwrap();
    let gpu2: Vec<_> = h
        .findings
        .iter()
        .filter(|f| f.subject.describe() == "GPU 2")
        .collect();
    for key in ["throttle_reasons", "xids"] {
        let f: Vec<_> = gpu2
            .iter()
            .filter(|f| f.metric.as_deref() == Some(key))
            .collect();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Skip, "{key}: {:?}", f[0]);
    }
}

#[test]
fn node_files_without_the_key_still_load_and_a_bad_reading_is_refused() {
    for (name, _) in EMBEDDED {
        nodecert::backend::sim::load_node(name).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = node_file(
        &dir,
        "h200-vm-1",
        "[[unavailable]]\nreadings = [\"fan_speed\"]\n",
    );
    let e = nodecert::backend::sim::load_node(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("fan_speed"), "{e}");
    let bad = node_file(
        &dir,
        "h200-vm-1",
        "[[unavailable]]\nreadings = [\"xids\"]\ngpus = [1]\n",
    );
    let e = nodecert::backend::sim::load_node(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("GPU 1 is not one of 0..0"), "{e}");
}
