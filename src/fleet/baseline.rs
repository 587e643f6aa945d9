//! `fleet baseline`: a suite that extends the fleet's SKU suite with what this fleet measures:
//! each figure's median over the nodes that passed becomes its typical value, and its floor
//! rises to a stated margin below that median (never below the SKU suite's own floor), so
//! that the next acceptance of the same hardware holds nodes to what their siblings do.

use super::{FleetReport, NodeVerdict};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The suite key of a figure: (table, key) for a Limit, or the collective's size table.
fn key_of(check: &str, figure: &str) -> Option<(String, String)> {
    let k = match (check, figure) {
        ("host_bandwidth", f @ ("h2d" | "d2h" | "bidir" | "all_gpus_h2d" | "device_copy")) => f,
        ("p2p_bandwidth", "p2p_read") => "read",
        ("p2p_bandwidth", "p2p_write") => "write",
        ("p2p_bandwidth", "p2p_bidir") => "bidir",
        ("p2p_latency", "latency") => "latency_us",
        // Each GPU's GEMM rate per precision, whose metric is its suite key (the sustained
        // rate is judged by its own drop, not by a floor, so it has no key).
        ("compute", f)
            if crate::suite::GemmPrecision::ALL
                .iter()
                .any(|p| p.metric() == f) =>
        {
            f
        }
        // Only a collective nodecert knows: the name becomes a TOML table.
        (c, "busbw")
            if c.strip_prefix("collective.")
                .and_then(crate::suite::CollectiveOp::parse)
                .is_some() =>
        {
            "min_busbw_gbps"
        }
        _ => return None,
    };
    Some((format!("checks.{check}"), k.to_string()))
}

/// A size as the suite reads it: "8GiB", or bytes.
fn size_key(b: u64) -> String {
    let t = crate::units::format_bytes(b);
    if t.contains('.') {
        b.to_string()
    } else {
        t.replace(' ', "")
    }
}

/// Two decimals, as people write floors.
fn n(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The suite's text. `extends` names the SKU suite (an embedded name or a path); `margin_pct`
/// is how far below the fleet's median the floor goes.
pub fn suite(
    r: &FleetReport,
    extends: &str,
    name: &str,
    margin_pct: f64,
) -> Result<String, String> {
    if !(margin_pct.is_finite() && margin_pct > 0.0 && margin_pct < 100.0) {
        return Err(format!(
            "--margin-pct must be above 0 and below 100, got {margin_pct}"
        ));
    }
    let passing: Vec<&str> = r
        .nodes
        .iter()
        .filter(|n| n.verdict <= NodeVerdict::Flagged)
        .map(|n| n.name.as_str())
        .collect();
    if passing.is_empty() {
        return Err(
            "no node of this fleet passed: there is nothing to take a baseline from".into(),
        );
    }
    let suites: std::collections::BTreeSet<&str> = r
        .nodes
        .iter()
        .filter(|n| passing.contains(&n.name.as_str()))
        .filter_map(|n| n.suite.as_deref())
        .collect();
    if suites.len() > 1 {
        return Err(format!(
            "the passing nodes ran {} suites ({}): take a baseline of one suite's nodes at a time",
            suites.len(),
            suites.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let m = margin_pct / 100.0;
    // table -> lines
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut sizes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let suite_name = suites.iter().next().copied().unwrap_or_default();
    // Passing nodes that measured a check under other conditions (other operands, other NCCL
    // settings) measured other things: no one median stands for them.
    let mut conditions: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for d in r.distributions.iter().filter(|d| d.suite == suite_name) {
        if key_of(&d.check, &d.figure).is_some()
            && d.points
                .iter()
                .any(|(node, _)| passing.contains(&node.as_str()))
        {
            conditions
                .entry(d.check.as_str())
                .or_default()
                .insert(d.conditions.as_str());
        }
    }
    if let Some((check, set)) = conditions.iter().find(|(_, set)| set.len() > 1) {
        let list: Vec<&str> = set
            .iter()
            .map(|c| if c.is_empty() { "none recorded" } else { c })
            .collect();
        return Err(format!(
            "the passing nodes measured {check} under {} sets of conditions ({}): take a \
             baseline of nodes measured alike",
            set.len(),
            list.join(" | ")
        ));
    }
    for d in r.distributions.iter().filter(|d| d.suite == suite_name) {
        let Some((table, key)) = key_of(&d.check, &d.figure) else {
            continue;
        };
        let values: Vec<f64> = d
            .points
            .iter()
            .filter(|(node, v)| passing.contains(&node.as_str()) && v.is_finite())
            .map(|p| p.1)
            .collect();
        if values.is_empty() {
            continue;
        }
        let median = crate::evidence::median(&values);
        let comment = format!(
            "# fleet median {} of {} passing nodes{}",
            n(median),
            values.len(),
            d.limit
                .map(|l| format!(
                    "; the SKU suite's {} was {}",
                    if d.higher_is_better {
                        "floor"
                    } else {
                        "ceiling"
                    },
                    n(l)
                ))
                .unwrap_or_default()
        );
        if key == "min_busbw_gbps" {
            let Some(bytes) = d.class.bytes else { continue };
            let floor = d
                .limit
                .map_or(median * (1.0 - m), |l| l.max(median * (1.0 - m)));
            sizes.entry(table).or_default().push(format!(
                "\"{}\" = {}    {comment}",
                size_key(bytes),
                n(floor)
            ));
            continue;
        }
        let line = if d.higher_is_better {
            let floor = d
                .limit
                .map_or(median * (1.0 - m), |l| l.max(median * (1.0 - m)));
            let warn = floor.max(median * (1.0 - m / 2.0));
            format!(
                "{key} = {{ fail_below = {}, warn_below = {}, typical = {} }}    {comment}",
                n(floor),
                n(warn),
                n(median)
            )
        } else {
            let ceiling = d
                .limit
                .map_or(median * (1.0 + m), |l| l.min(median * (1.0 + m)));
            let warn = ceiling.min(median * (1.0 + m / 2.0));
            format!(
                "{key} = {{ fail_above = {}, warn_above = {}, typical = {} }}    {comment}",
                n(ceiling),
                n(warn),
                n(median)
            )
        };
        tables.entry(table).or_default().push(line);
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Written by `nodecert fleet baseline` from {} nodes ({} passing){}: each figure's\n\
         # typical value is the median of the passing nodes, its floor {margin_pct}% below it (never\n\
         # below the SKU suite's own) and its warning level halfway.",
        r.nodes.len(),
        passing.len(),
        if r.simulated { ", SIMULATED" } else { "" }
    );
    let _ = writeln!(s, "format_version = 1");
    let _ = writeln!(s, "name = {}", toml::Value::String(name.to_string()));
    let _ = writeln!(s, "extends = {}", toml::Value::String(extends.to_string()));
    for (table, lines) in &tables {
        let _ = writeln!(s, "\n[{table}]");
        for l in lines {
            let _ = writeln!(s, "{l}");
        }
    }
    for (table, lines) in &sizes {
        let _ = writeln!(s, "\n[{table}.min_busbw_gbps]");
        for l in lines {
            let _ = writeln!(s, "{l}");
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Six simulated H100 nodes n1..n6, each evidence edited by `edit(i, ..)`, judged as a
    /// fleet.
    fn simulated_fleet(edit: impl Fn(u64, &mut crate::evidence::Evidence)) -> FleetReport {
        let mut keys = super::super::gather::Keys::default();
        let nodes: Vec<super::super::gather::NodeSummary> = (1..=6u64)
            .map(|i| {
                let name = format!("n{i}");
                let mut ev = crate::testutil::simulated_named("h100-sxm-8", &name, i, &[]);
                edit(i, &mut ev);
                super::super::gather::summarize(super::super::gather::blank(&name), &ev, &mut keys)
            })
            .collect();
        super::super::judge::judge(nodes, &[], 10.0)
    }

    /// A fleet of three passing nodes and one failing one, with figures of every kind.
    fn fleet() -> FleetReport {
        use crate::evidence::Subject;
        let mut r = super::super::judge::judge(vec![], &[], 10.0);
        for (name, v) in [
            ("n1", NodeVerdict::Pass),
            ("n2", NodeVerdict::Flagged),
            ("n3", NodeVerdict::Pass),
            ("n4", NodeVerdict::Fail),
        ] {
            let mut n = super::super::gather::blank(name);
            n.verdict = v;
            n.suite = Some("s".into());
            r.nodes.push(n);
        }
        let d = |check: &str,
                 figure: &str,
                 bytes: Option<u64>,
                 higher: bool,
                 limit: Option<f64>,
                 vals: [f64; 4]| {
            super::super::Distribution {
                suite: "s".into(),
                check: check.into(),
                metric: figure.into(),
                figure: figure.into(),
                class: Subject {
                    bytes,
                    ..Default::default()
                },
                unit: "u".into(),
                higher_is_better: higher,
                limit,
                conditions: String::new(),
                median: f64::NAN,
                points: ["n1", "n2", "n3", "n4"]
                    .iter()
                    .zip(vals)
                    .map(|(n, v)| (n.to_string(), v))
                    .collect(),
            }
        };
        r.distributions = vec![
            // n4 failed: its 10 is not part of any median; n2's NaN is not a figure.
            d(
                "host_bandwidth",
                "h2d",
                None,
                true,
                Some(48.0),
                [100.0, 100.0, 100.0, 10.0],
            ),
            d(
                "host_bandwidth",
                "d2h",
                None,
                true,
                Some(98.0),
                [100.0, f64::NAN, 100.0, 10.0],
            ),
            d(
                "p2p_bandwidth",
                "p2p_write",
                None,
                true,
                None,
                [200.0, 220.0, 240.0, 10.0],
            ),
            d(
                "p2p_bandwidth",
                "p2p_bidir",
                None,
                true,
                Some(100.0),
                [400.0, 400.0, 400.0, 10.0],
            ),
            d(
                "p2p_latency",
                "latency",
                None,
                false,
                Some(10.0),
                [2.0, 2.0, 2.0, 90.0],
            ),
            d(
                "collective.all_reduce",
                "busbw",
                Some(8 << 30),
                true,
                Some(460.0),
                [500.0, 500.0, 500.0, 1.0],
            ),
            d(
                "collective.all_gather",
                "busbw",
                Some(1 << 20),
                true,
                Some(300.0),
                [400.0, 400.0, 400.0, 1.0],
            ),
            d(
                "collective.bogus]\n[x",
                "busbw",
                Some(1 << 20),
                true,
                None,
                [1.0, 1.0, 1.0, 1.0],
            ),
            // Each node's slowest GPU: n4 failed, so its 100 is not part of the median.
            d(
                "compute",
                "bf16_tflops",
                None,
                true,
                Some(590.0),
                [790.0, 800.0, 810.0, 100.0],
            ),
            d(
                "compute",
                "fp32_tflops",
                None,
                true,
                Some(38.0),
                [51.0, 51.0, 51.0, 10.0],
            ),
            // The sustained rate is judged by its drop, not a floor: no key.
            d(
                "compute",
                "sustained_tflops",
                None,
                true,
                None,
                [700.0, 700.0, 700.0, 1.0],
            ),
            d(
                "training",
                "step_time",
                None,
                false,
                None,
                [1.0, 1.0, 1.0, 1.0],
            ),
        ];
        r
    }

    #[test]
    fn each_figure_gets_its_median_as_typical_a_floor_a_margin_below_and_a_warning_halfway() {
        let text = suite(&fleet(), "h100-sxm-8", "f", 10.0).unwrap();
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.split("    #").next().unwrap())
            .filter(|l| !l.starts_with('#'))
            .collect();
        assert_eq!(
            lines,
            [
                "format_version = 1",
                "name = \"f\"",
                "extends = \"h100-sxm-8\"",
                "",
                "[checks.compute]",
                "bf16_tflops = { fail_below = 720, warn_below = 760, typical = 800 }",
                "fp32_tflops = { fail_below = 45.9, warn_below = 48.45, typical = 51 }",
                "",
                "[checks.host_bandwidth]",
                "h2d = { fail_below = 90, warn_below = 95, typical = 100 }",
                "d2h = { fail_below = 98, warn_below = 98, typical = 100 }",
                "",
                "[checks.p2p_bandwidth]",
                "write = { fail_below = 198, warn_below = 209, typical = 220 }",
                "bidir = { fail_below = 360, warn_below = 380, typical = 400 }",
                "",
                "[checks.p2p_latency]",
                "latency_us = { fail_above = 2.2, warn_above = 2.1, typical = 2 }",
                "",
                "[checks.collective.all_gather.min_busbw_gbps]",
                "\"1MiB\" = 360",
                "",
                "[checks.collective.all_reduce.min_busbw_gbps]",
                "\"8GiB\" = 460",
            ],
            "{text}"
        );
        assert!(
            text.contains("# fleet median 100 of 2 passing nodes; the SKU suite's floor was 98"),
            "{text}"
        );
        // Without the SKU's limits, the margin alone sets them.
        let mut bare = fleet();
        for d in &mut bare.distributions {
            d.limit = None;
        }
        let text = suite(&bare, "h100-sxm-8", "f", 10.0).unwrap();
        for line in [
            "h2d = { fail_below = 90, warn_below = 95, typical = 100 }",
            "d2h = { fail_below = 90, warn_below = 95, typical = 100 }",
            "latency_us = { fail_above = 2.2, warn_above = 2.1, typical = 2 }",
            "\"8GiB\" = 450",
        ] {
            assert!(text.lines().any(|l| l.starts_with(line)), "{line}\n{text}");
        }
        // The margin is a share below 100%; the nodes that passed ran one suite.
        assert!(suite(&fleet(), "x", "f", 99.9).is_ok());
        assert!(suite(&fleet(), "x", "f", 100.0).is_err());
        let mut two = fleet();
        two.nodes[1].suite = Some("t".into());
        let e = suite(&two, "x", "f", 10.0).unwrap_err();
        assert!(e.contains("ran 2 suites (s, t)"), "{e}");
    }

    #[test]
    fn the_baseline_of_a_simulated_fleet_is_a_valid_suite_that_tightens_floors_only() {
        let r = simulated_fleet(|_, _| {});
        assert_eq!(r.verdict, NodeVerdict::Pass);
        let text = suite(&r, "h100-sxm-8", "fleet-a", 5.0).unwrap();
        let loaded = crate::suite::load::load_source(crate::config::Source {
            name: "fleet-a.toml".into(),
            text: text.clone(),
        })
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let s = &loaded.suite;
        let p2p = s.checks.p2p_bandwidth.as_ref().unwrap();
        let typical = p2p.read.typical.unwrap();
        let floor = p2p.read.fail_below.unwrap();
        assert!((floor - (typical * 0.95).max(335.0)).abs() < 0.01, "{text}");
        assert!(floor >= 335.0, "never below the SKU floor");
        // Warned halfway between the floor and the median.
        let warn = p2p.read.warn_below.unwrap();
        assert!(warn >= floor && warn < typical, "{text}");
        let lat = s.checks.p2p_latency.as_ref().unwrap();
        assert!(lat.latency_us.fail_above.unwrap() <= 10.0);
        let ar = &s.checks.collective[&crate::suite::CollectiveOp::AllReduce];
        assert!(
            ar.min_busbw_gbps.get("8GiB").copied().unwrap() >= 460.0,
            "{text}"
        );
        // Each GPU's GEMM floors: the sustained rate has none.
        let c = s.checks.compute.as_ref().unwrap();
        for (name, l, sku) in [
            ("fp32", &c.fp32_tflops, 38.0),
            ("tf32", &c.tf32_tflops, 0.0),
            ("bf16", &c.bf16_tflops, 590.0),
        ] {
            let (typical, floor) = (l.typical.unwrap(), l.fail_below.unwrap());
            assert!(floor >= sku, "{name}: never below the SKU floor\n{text}");
            assert!(
                (floor - (typical * 0.95).max(sku)).abs() < 0.01,
                "{name}\n{text}"
            );
        }
        assert!(!text.contains("sustained"), "{text}");
        assert!(text.contains(" of 6 passing nodes"));
        // Nothing to take from a fleet where no node passed.
        let mut bad = r.clone();
        for n in &mut bad.nodes {
            n.verdict = NodeVerdict::Fail;
        }
        assert!(suite(&bad, "h100-sxm-8", "x", 5.0).is_err());
        assert!(suite(&r, "h100-sxm-8", "x", 0.0).is_err());
    }

    /// Nodes whose compute check multiplied other operands (an older nodecert recorded none)
    /// are not one distribution: the fleet compares them apart, names the conditions on their
    /// figures, finds no outlier across them, and refuses to take one baseline of both.
    #[test]
    fn nodes_measured_under_other_conditions_are_compared_apart_and_no_baseline_mixes_them() {
        let r = simulated_fleet(|i, ev| {
            if i > 3 {
                let c = ev.checks.iter_mut().find(|c| c.id == "compute").unwrap();
                c.facts
                    .retain(|f| f.name != crate::checks::compute::OPERANDS);
                // Slower by far: across the two groups, every one an outlier.
                for m in &mut c.metrics {
                    m.median *= 0.8;
                }
            }
        });
        let bf16: Vec<&super::super::Distribution> = r
            .distributions
            .iter()
            .filter(|d| d.check == "compute" && d.figure == "bf16_tflops")
            .collect();
        assert_eq!(bf16.len(), 2, "{bf16:#?}");
        assert!(bf16.iter().all(|d| d.points.len() == 3));
        assert!(bf16.iter().any(|d| d
            .label()
            .starts_with("bf16_tflops, gemm_operands: integers -45..45")));
        assert!(bf16.iter().any(|d| d.label() == "bf16_tflops"));
        assert!(
            !r.outliers.iter().any(|o| o.check == "compute"),
            "{:#?}",
            r.outliers
        );
        let e = suite(&r, "h100-sxm-8", "fleet-a", 5.0).unwrap_err();
        assert!(
            e.starts_with(
                "the passing nodes measured compute under 2 sets of conditions (none recorded | \
                 gemm_operands: integers -45..45"
            ),
            "{e}"
        );
    }
}
