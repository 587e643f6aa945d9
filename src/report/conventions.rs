//! The report's statement of how each bandwidth figure counts (one direction or the sum of
//! both; bytes once or read plus written) and, where the tool users compare it with counts
//! otherwise, the figure as that tool would report it.

use crate::checks::judge::fmt_num;
use crate::checks::{collective, host_bandwidth, p2p_bandwidth};
use crate::evidence::{median, Evidence};
use serde::Serialize;

#[derive(Debug, Serialize, PartialEq)]
pub struct ConventionRow {
    /// The check's title.
    pub check: String,
    /// The figure, as the report names it: "device-local copy".
    pub figure: String,
    /// "one direction, bytes read plus bytes written".
    pub convention: String,
    /// "nvbandwidth".
    pub tool: String,
    /// The node's median as the tool would report it ("1450 GB/s as nvbandwidth counts it:
    /// bytes once"), or how it compares ("counted as nvbandwidth counts it").
    pub tool_figure: String,
    /// The tool counts otherwise: `tool_figure` carries a converted number.
    pub differs: bool,
}

/// The human name of a figure, from the check that measures it.
fn figure_name(name: &str) -> String {
    host_bandwidth::FIGURES
        .iter()
        .chain(p2p_bandwidth::FIGURES.iter())
        .chain(collective::FIGURES.iter())
        .find(|(n, _)| *n == name)
        .map_or_else(|| name.to_string(), |(_, h)| h.to_string())
}

/// One row per (check, figure) whose metrics record a convention, in the order measured.
/// Evidence written before conventions were recorded gives none.
pub fn build(ev: &Evidence) -> Vec<ConventionRow> {
    let mut out = Vec::new();
    for c in &ev.checks {
        let mut names: Vec<&str> = Vec::new();
        for m in c.metrics.iter().filter(|m| m.convention.is_some()) {
            if !names.contains(&m.name.as_str()) {
                names.push(&m.name);
            }
        }
        for name in names {
            let of: Vec<&crate::evidence::Metric> =
                c.metrics.iter().filter(|m| m.name == name).collect();
            let Some(conv) = of.iter().find_map(|m| m.convention) else {
                continue;
            };
            let tool = conv.compared_with.name();
            let node = median(&of.iter().map(|m| m.median).collect::<Vec<_>>());
            let (tool_figure, differs) = match conv.tool_factor() {
                Some(f) if node.is_finite() => {
                    let mut how = Vec::new();
                    if conv.directions == crate::evidence::Directions::SumOfBoth {
                        how.push("one direction, half the sum");
                    }
                    if conv.bytes == crate::evidence::Bytes::ReadPlusWritten {
                        how.push("bytes counted once");
                    }
                    (
                        format!(
                            "{} {} as {tool} counts it ({}; node median)",
                            fmt_num(node * f),
                            of[0].unit,
                            how.join(", ")
                        ),
                        true,
                    )
                }
                Some(_) => (format!("counted otherwise than {tool}"), true),
                None => (format!("counted as {tool} counts it"), false),
            };
            out.push(ConventionRow {
                check: c.title.clone(),
                figure: figure_name(name),
                convention: conv.describe(),
                tool: tool.into(),
                tool_figure,
                differs,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(rows: &'a [ConventionRow], figure: &str) -> &'a ConventionRow {
        rows.iter()
            .find(|r| r.figure == figure)
            .unwrap_or_else(|| panic!("no row for {figure}: {rows:#?}"))
    }

    #[test]
    fn figures_counted_otherwise_are_also_given_as_the_tool_counts_them() {
        let mut ev = crate::testutil::simulated("h200-vm-1", &[]);
        let host = ev
            .checks
            .iter_mut()
            .find(|c| c.id == "host_bandwidth")
            .unwrap();
        for m in host.metrics.iter_mut() {
            m.median = match m.name.as_str() {
                "device_copy" => 2900.0,
                "bidir" => 100.0,
                _ => m.median,
            };
        }
        let rows = build(&ev);
        let copy = row(&rows, "device-local copy");
        assert_eq!(
            copy.convention,
            "one direction, bytes read plus bytes written"
        );
        assert!(copy.differs);
        assert_eq!(
            copy.tool_figure,
            "1450 GB/s as nvbandwidth counts it (bytes counted once; node median)"
        );
        let both = row(&rows, "both directions at once");
        assert_eq!(
            both.convention,
            "sum of both directions, bytes counted once"
        );
        assert!(both
            .tool_figure
            .starts_with("50.0 GB/s as nvbandwidth counts it"));
        let h2d = row(&rows, "host-to-device");
        assert!(!h2d.differs);
        assert_eq!(h2d.tool_figure, "counted as nvbandwidth counts it");
        let bus = row(&rows, "bus bandwidth");
        assert_eq!((bus.tool.as_str(), bus.differs), ("nccl-tests", false));
    }

    #[test]
    fn peer_both_ways_is_a_sum_that_nvbandwidth_reports_one_direction_of() {
        let ev = crate::testutil::simulated("l40s-pcie-4", &[]);
        let rows = build(&ev);
        let both = row(&rows, "peer both ways");
        assert!(both.differs);
        let measured = median(
            &ev.check("p2p_bandwidth")
                .unwrap()
                .metrics
                .iter()
                .filter(|m| m.name == "p2p_bidir")
                .map(|m| m.median)
                .collect::<Vec<_>>(),
        );
        assert!(
            both.tool_figure
                .starts_with(&format!("{} GB/s", fmt_num(measured / 2.0))),
            "{}",
            both.tool_figure
        );
        assert!(!row(&rows, "peer read").differs);
        // Latency is not a bandwidth: it states no convention.
        assert!(rows.iter().all(|r| r.check != "Peer-to-peer latency"));
    }

    #[test]
    fn evidence_written_before_conventions_states_none() {
        let mut ev = crate::testutil::simulated("h200-vm-1", &[]);
        for c in &mut ev.checks {
            for m in &mut c.metrics {
                m.convention = None;
            }
        }
        assert!(build(&ev).is_empty());
    }
}
