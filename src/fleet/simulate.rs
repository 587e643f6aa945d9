//! A simulated fleet: N simulated nodes, each its own seed and name (so no two share a GPU),
//! faults injected on the nodes named, each run as `nodecert run --simulate` runs it into
//! `OUT/<node>/`. The fleet report is then written as for a real fleet. Everything it writes
//! says SIMULATED.

/// The nodes of a simulated fleet of `n`: n01, n02, ... (zero-padded to the widest).
pub fn names(n: u32) -> Vec<String> {
    let w = n.to_string().len().max(2);
    (1..=n).map(|i| format!("n{i:0w$}")).collect()
}

/// `NODE:FAULT` (as `--inject` spells the fault) split at its first colon.
pub fn parse_inject(spec: &str) -> Result<(String, String), String> {
    let (node, fault) = spec
        .split_once(':')
        .ok_or_else(|| format!("--inject {spec:?}: give NODE:FAULT, e.g. n03:nvlink-down:gpu=2"))?;
    crate::commands::check_node_name(node).map_err(|e| format!("--inject {spec:?}: {e}"))?;
    crate::backend::sim::Fault::parse(fault).map_err(|e| format!("--inject {spec:?}: {e}"))?;
    Ok((node.to_string(), fault.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_padded_so_they_sort_and_injections_name_a_node_and_a_fault() {
        assert_eq!(names(3), ["n01", "n02", "n03"]);
        assert_eq!(names(100).last().unwrap(), "n100");
        assert_eq!(names(100)[0], "n001");
        assert_eq!(
            parse_inject("n03:nvlink-down:gpu=2").unwrap(),
            ("n03".to_string(), "nvlink-down:gpu=2".to_string())
        );
        assert!(parse_inject("n03").is_err());
        assert!(parse_inject("n03:no-such-fault").is_err());
        assert!(parse_inject("../x:nvlink-down").is_err());
    }
}
