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

/// A node whose GPU does not answer its NVLink state shows no link for it, and its link state is
/// named unavailable: its pairs' link counts and the NVSwitch count are not available here (never
/// failed as links down), its counters are not judged as those of a GPU without NVLink, and the
/// run is partial. Where no GPU answers, whether NVLink survived is not available either.
#[test]
fn a_gpu_whose_nvlink_state_is_not_given_is_not_a_gpu_without_nvlink() {
    let ev = run(
        "h100-sxm-8",
        "h100-sxm-8",
        "[[unavailable]]\nreadings = [\"nvlink_state\"]\ngpus = [3]\n",
    );
    assert!(ev.node.gpus[3].nvlinks.is_empty());
    assert_eq!(ev.node.nvswitches, None);
    assert_eq!(ev.node.gpus[4].nvlinks.len(), 18);
    let topo = ev.check("topology").unwrap();
    let skipped: Vec<&str> = topo
        .findings
        .iter()
        .filter(|f| f.status == Status::Skip)
        .map(|f| f.reason.as_str())
        .collect();
    assert_eq!(skipped.len(), 9, "{skipped:#?}");
    assert!(skipped.contains(&"NVSwitch count: not available here"));
    assert!(skipped.contains(
        &"GPU 3 - GPU 7: not available here: the NVLink state of GPU 3 (the links between them \
          are not known)"
    ));
    assert!(topo.findings.iter().all(|f| f.status != Status::Fail));
    let h = ev.check("health").unwrap();
    assert!(h.findings.iter().any(|f| f.status == Status::Skip
        && f.reason
            == "not available here: NVLink error counters of GPU 3 (its NVLink state could not \
                be read, so not every link's counters were)"));
    assert_eq!(ev.verdict, nodecert::evidence::Verdict::Partial);
    assert_eq!(
        ev.format_version,
        nodecert::evidence::CLOSING_FORMAT_VERSION
    );
    // The certificate does not say every pair is linked as expected: 7 were not compared.
    let r = nodecert::report::render(&ev, None, &Default::default()).unwrap();
    for page in [&r.markdown, &r.html] {
        assert!(!page.contains("Every GPU pair is linked as the suite expects"));
        assert!(
            page.contains("7 GPU pair(s) not compared: not available here (the NVLink state"),
            "{page}"
        );
    }

    let ev = run(
        "h100-sxm-8",
        "h100-sxm-8",
        "[[unavailable]]\nreadings = [\"nvlink_state\"]\n",
    );
    let v = ev.check("virtualization").unwrap();
    assert!(
        v.findings.iter().any(|f| f.status == Status::Skip
            && f.reason.starts_with(
                "whether NVLink survived: not available here: no link was seen active, and the \
                 NVLink state of GPU 0, GPU 1"
            )),
        "{:#?}",
        v.findings
    );
    assert!(v.findings.iter().all(|f| f.status != Status::Fail));
    assert_eq!(ev.verdict, nodecert::evidence::Verdict::Partial);
}
