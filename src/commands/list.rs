//! `nodecert list`: the embedded suites, simulated nodes and faults.

use crate::backend::sim;
use crate::suite::load;

pub fn list_text() -> String {
    let mut s = String::from("Embedded suites:\n");
    for (name, _) in load::EMBEDDED {
        let d = load::load(name)
            .map(|l| l.suite.description)
            .unwrap_or_default();
        s.push_str(&format!("  {name:<18} {d}\n"));
    }
    s.push_str("\nSimulated nodes (--simulate NAME):\n");
    for (name, _) in sim::EMBEDDED {
        let d = sim::load_node(name)
            .map(|n| n.description)
            .unwrap_or_default();
        s.push_str(&format!("  {name:<18} {d}\n"));
    }
    s.push_str("\nFaults (--inject NAME[:key=value,...]):\n");
    for k in sim::FaultKind::ALL {
        s.push_str(&format!("  {:<20} {}\n", k.name(), k.describe()));
    }
    s
}
