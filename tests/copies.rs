//! Copy verification: every copy check judges the data its copies carried, per GPU or per pair,
//! and a simulated copy that returns wrong data fails the check that made it, naming the pair.

use nodecert::evidence::{Evidence, Status};

fn run(node: &str, fault: &str) -> Evidence {
    nodecert::runner::simulate(node, node, &[fault], 1).unwrap()
}

fn failing(ev: &Evidence, check: &str) -> Vec<String> {
    let c = ev.check(check).unwrap_or_else(|| panic!("no {check}"));
    assert_eq!(c.status, Status::Fail, "{check}: {}", c.summary);
    c.findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| format!("{} | {}", f.subject.describe(), f.reason))
        .collect()
}

#[test]
fn a_corrupt_peer_copy_fails_every_peer_check_against_the_pair() {
    let ev = run("h100-sxm-8", "corrupt-copy:gpu=1,peer=3");
    let p2p = failing(&ev, "p2p_bandwidth");
    for want in [
        "GPU 1 -> GPU 3 | GPU 1 -> GPU 3: peer read copy returned wrong data",
        "GPU 3 -> GPU 1 | GPU 3 -> GPU 1: peer read copy returned wrong data",
        "GPU 1 -> GPU 3 | GPU 1 -> GPU 3: peer write copy returned wrong data",
        "GPU 1 <-> GPU 3 | GPU 1 <-> GPU 3: peer both ways copy returned wrong data",
    ] {
        assert!(p2p.contains(&want.to_string()), "{want}: {p2p:#?}");
    }
    // Only that pair: no other pair or GPU is blamed.
    assert_eq!(p2p.len(), 5, "{p2p:#?}");
    let lat = failing(&ev, "p2p_latency");
    assert_eq!(
        lat,
        vec![
            "GPU 1 -> GPU 3 | GPU 1 -> GPU 3: small peer transfer copy returned wrong data",
            "GPU 3 -> GPU 1 | GPU 3 -> GPU 1: small peer transfer copy returned wrong data",
        ]
    );
    // Host copies were not touched.
    assert_eq!(ev.check("host_bandwidth").unwrap().status, Status::Pass);
    // The report's matrix cell of the pair is marked.
    let p = ev.check("p2p_bandwidth").unwrap();
    assert!(p.findings.iter().any(|f| f.status == Status::Fail
        && f.metric.as_deref() == Some("p2p_read")
        && f.subject.describe() == "GPU 1 -> GPU 3"));
}

#[test]
fn a_corrupt_host_copy_fails_host_bandwidth_on_that_gpu() {
    let ev = run("h100-sxm-8", "corrupt-copy:gpu=6");
    let host = failing(&ev, "host_bandwidth");
    for human in [
        "host-to-device",
        "device-to-host",
        "both directions at once",
        "host-to-device with all GPUs at once",
        "device-local copy",
    ] {
        let want = format!("GPU 6 | GPU 6: {human} copy returned wrong data");
        assert!(host.contains(&want), "{want}: {host:#?}");
    }
    assert_eq!(host.len(), 5, "{host:#?}");
    assert_eq!(ev.check("p2p_bandwidth").unwrap().status, Status::Pass);
    assert_eq!(ev.check("p2p_latency").unwrap().status, Status::Pass);
}

#[test]
fn intact_copies_are_a_judgement_of_their_own() {
    let ev = nodecert::runner::simulate("h100-sxm-8", "h100-sxm-8", &[], 1).unwrap();
    for (check, copies) in [
        ("host_bandwidth", 8 * 5),
        ("p2p_bandwidth", 56 * 2 + 28),
        ("p2p_latency", 56),
    ] {
        let c = ev.check(check).unwrap();
        let want = format!("data intact after all {copies} copy measurements");
        assert!(
            c.findings
                .iter()
                .any(|f| f.status == Status::Pass && f.reason == want),
            "{check}: no '{want}'"
        );
    }
}
