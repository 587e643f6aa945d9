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
    // As wide as the longest name, so that every description starts in one column.
    let w = sim::FaultKind::ALL
        .iter()
        .map(|k| k.name().len())
        .max()
        .unwrap_or(0);
    for k in sim::FaultKind::ALL {
        s.push_str(&format!("  {:<w$} {}\n", k.name(), k.describe()));
    }
    s
}

#[cfg(test)]
mod tests {
    /// Every fault's description starts in one column, however long the longest name.
    #[test]
    fn fault_descriptions_start_in_one_column() {
        let text = super::list_text();
        let faults = text.split("Faults (").nth(1).unwrap();
        let starts: Vec<usize> = faults
            .lines()
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(|l| {
                let name_end = 2 + l[2..].find(' ').unwrap();
                name_end + l[name_end..].find(|c: char| c != ' ').unwrap()
            })
            .collect();
        assert!(starts.len() > 10, "{faults}");
        assert!(starts.iter().all(|&c| c == starts[0]), "{starts:?}");
    }
}
