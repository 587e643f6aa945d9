//! The training check's golden comparison catches a node that computes wrong answers: the
//! "node" losses here come from deliberately wrong kernels (test-only flaws of the CPU reference).

use nodecert::checks::{training::Training, Check, Ctx, Measured};
use nodecert::evidence::{Metric, Status, Subject};
use nodecert::training::reference::Flaw;

fn judge(flaw: Flaw) -> (Status, String) {
    let loaded = nodecert::suite::load::load("h200-vm-1").unwrap();
    let cfg = loaded.suite.checks.training.clone().unwrap();
    let golden = nodecert::training::golden_config(&cfg);
    let node = nodecert::training::cpu_losses(&golden, flaw).unwrap();
    let cpu = nodecert::training::cpu_losses(&golden, Flaw::None).unwrap();
    let m = Measured {
        metrics: vec![
            Metric::new("golden_node_loss", Subject::node(), "", node),
            Metric::new("golden_cpu_loss", Subject::node(), "", cpu),
        ],
        facts: vec![],
    };
    let inv = nodecert::inventory::Inventory::default();
    let ctx = Ctx {
        suite: &loaded.suite,
        inventory: &inv,
        earlier: &[],
        simulated: false,
    };
    let f = Training(cfg).evaluate(&ctx, &m).into_iter().next().unwrap();
    (f.status, f.reason)
}

#[test]
fn wrong_kernels_are_caught_and_reordered_sums_are_not() {
    for flaw in [Flaw::ReluGradLeaks, Flaw::WrongBiasGrad] {
        let (s, why) = judge(flaw);
        assert_eq!(s, Status::Fail, "{flaw:?} slipped through: {why}");
        assert!(why.contains("computes wrong answers"), "{why}");
    }
    for flaw in [Flaw::None, Flaw::ReorderedSums] {
        let (s, why) = judge(flaw);
        assert_eq!(s, Status::Pass, "{flaw:?} is a legitimate result: {why}");
    }
}
