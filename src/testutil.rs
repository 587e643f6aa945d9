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
    let rec = crate::evidence::SimulationRecord {
        node: node.into(),
        seed: 1,
        faults: b.faults().iter().map(Fault::label).collect(),
    };
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent).expect("run")
}
