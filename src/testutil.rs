//! Helpers for unit tests.

use crate::backend::sim::{self, Fault, SimBackend};
use crate::backend::Backend;
use crate::evidence::{Environment, Evidence};
use crate::suite::load;

/// A simulated run of `node` with `faults`, as `nodecert run --simulate` makes it.
pub fn simulated(node: &str, faults: &[&str]) -> Evidence {
    let loaded = load::load(node).expect("embedded suite");
    let faults = faults
        .iter()
        .map(|f| Fault::parse(f).expect("fault"))
        .collect();
    let mut b = SimBackend::new(sim::load_node(node).expect("node"), faults, 1).expect("sim");
    let inv = b.inventory().expect("inventory");
    let rec = b.record();
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent).expect("run")
}

/// A simulated run of `node` named `name` (one node of a simulated fleet) with `seed`.
pub fn simulated_named(node: &str, name: &str, seed: u64, faults: &[&str]) -> Evidence {
    let loaded = load::load(node).expect("embedded suite");
    let faults = faults
        .iter()
        .map(|f| Fault::parse(f).expect("fault"))
        .collect();
    let mut b = SimBackend::new(sim::load_node(node).expect("node"), faults, seed)
        .expect("sim")
        .named(name);
    let inv = b.inventory().expect("inventory");
    let rec = b.record();
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent).expect("run")
}

/// A four-GPU PCIe box (the simulated l40s-pcie-4) with its suite, and every ordered pair's
/// `metric` measured at `value(a, b)` (in `unit`), its data verified. With `two_sockets`, pairs
/// 0-1 and 2-3 are near (NODE) and the rest across sockets (SYS), all over PCIe.
pub fn pcie_box(
    metric: &str,
    unit: &str,
    two_sockets: bool,
    value: impl Fn(usize, usize) -> f64,
) -> (
    crate::suite::Suite,
    crate::inventory::Inventory,
    crate::checks::Measured,
) {
    use crate::evidence::{Metric, Subject};
    let mut inv = simulated("l40s-pcie-4", &[]).node;
    if two_sockets {
        for p in &mut inv.pairs {
            p.nvlinks = 0;
            p.pcie_path = Some(if p.a / 2 == p.b / 2 { "NODE" } else { "SYS" }.into());
        }
    }
    let suite = load::load("l40s-pcie-4").expect("embedded suite").suite;
    let mut m = crate::checks::Measured::default();
    for (a, b) in inv.ordered_pairs() {
        let s = Subject::pair(a, b);
        m.metrics
            .push(Metric::new(metric, s.clone(), unit, vec![value(a, b); 3]));
        crate::checks::verify::record(&mut m, metric, s, Some(true));
    }
    (suite, inv, m)
}

/// What a check sees of a simulated node's `suite` and `inventory`, with no earlier checks.
pub fn ctx<'a>(
    suite: &'a crate::suite::Suite,
    inventory: &'a crate::inventory::Inventory,
) -> crate::checks::Ctx<'a> {
    crate::checks::Ctx {
        suite,
        inventory,
        earlier: &[],
        simulated: true,
    }
}
