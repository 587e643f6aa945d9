//! A healthy node must pass every shipped suite, whatever the noise: 200 seeds each.

use nodecert::evidence::Status;

const SHIPPED: [&str; 5] = [
    "h100-sxm-8",
    "h200-sxm-8",
    "a100-sxm-80gb-8",
    "l40s-pcie-4",
    "h200-vm-1",
];

#[test]
fn healthy_nodes_pass_their_suites_over_200_seeds() {
    for suite in SHIPPED {
        for seed in 0..200u64 {
            let ev = nodecert::runner::simulate(suite, suite, &[], seed)
                .unwrap_or_else(|e| panic!("{suite} seed {seed}: {e}"));
            assert!(ev.simulated);
            for c in &ev.checks {
                assert!(
                    matches!(c.status, Status::Pass | Status::Skip),
                    "false alarm: {suite} seed {seed}: {} is {:?}: {}",
                    c.id,
                    c.status,
                    c.summary
                );
            }
        }
    }
}

#[test]
fn every_fault_is_caught_over_many_seeds() {
    // The fault matrix of tests/cli.rs holds at one seed; here each fault must be caught at all.
    let cases = [
        ("h100-sxm-8", "nvlink-down:gpu=2", "topology"),
        ("h100-sxm-8", "pcie-downtrained:gpu=5", "topology"),
        ("h200-sxm-8", "p2p-disabled", "virtualization"),
        ("h100-sxm-8", "slow-host-bandwidth:gpu=6", "host_bandwidth"),
        ("h200-sxm-8", "slow-gpu-pair:gpu=1,peer=4", "p2p_bandwidth"),
        (
            "a100-sxm-80gb-8",
            "slow-collective",
            "collective.all_reduce",
        ),
        ("l40s-pcie-4", "slow-collective", "collective.all_reduce"),
        ("h100-sxm-8", "ecc-uncorrectable:gpu=4", "health"),
        ("h200-vm-1", "row-remap-pending", "health"),
        ("h100-sxm-8", "collective-corrupt", "collective.all_reduce"),
        ("h100-sxm-8", "gpu-missing", "topology"),
        ("h100-sxm-8", "gpu-lost:gpu=2", "health"),
        ("h100-sxm-8", "gpu-lost:gpu=2", "topology"),
        ("h100-sxm-8", "corrupt-copy:gpu=1,peer=3", "p2p_bandwidth"),
        ("h100-sxm-8", "corrupt-copy:gpu=1,peer=3", "p2p_latency"),
        ("l40s-pcie-4", "corrupt-copy:gpu=2", "host_bandwidth"),
    ];
    for (suite, fault, check) in cases {
        for seed in 0..25u64 {
            let ev = nodecert::runner::simulate(suite, suite, &[fault], seed).unwrap();
            let c = ev
                .check(check)
                .unwrap_or_else(|| panic!("{fault}: no {check}"));
            assert_eq!(
                c.status,
                Status::Fail,
                "{suite} {fault} seed {seed}: {check} is {:?}: {}",
                c.status,
                c.summary
            );
            assert_eq!(ev.assess(), nodecert::evidence::Verdict::Fail);
        }
    }
}
