//! The slow node or the slow link, from pair figures.
//!
//! A first pass measures every node pair ([`super::pairwise::rounds`]). A pair below the floor
//! has two suspects; a second pass measures each suspect again with up to two nodes that had
//! no slow pair ([`second_pass`]), a few pairs at a time, so that the pass is quieter than the
//! first. [`judge`] then reads both (the second pass's figure wins for a pair measured twice):
//! - a **reference node** has at least one pair at or above the floor (it can reach it);
//! - a node slow with at least two reference partners and fine with none is a **node** fault;
//! - a slow pair whose two nodes are each fine with reference partners (and mostly so) is a
//!   **link** suspect: the cable, the switch port or the route between them (nccl#325: "1-3
//!   good, 2-4 good, 1-2 bad");
//! - no pair at all at the floor (three nodes or more) is a **fabric**-wide problem, not every
//!   node at once; so are groups of nodes fine among themselves and slow across (two racks
//!   behind a bad spine link: one verdict naming the groups, not a link per pair);
//! - anything else is **undecided**, with the reason (two nodes only, too few reference
//!   partners, slow with most partners but not all).
//!
//! Figures that are not numbers, or negative, are an error, never a verdict.

use crate::checks::judge::fmt_num;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One measured pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairResult {
    /// One node (rank) of the pair.
    pub a: usize,
    /// The other node (rank).
    pub b: usize,
    /// The bandwidth measured between them, in Gb/s (gigabits per second).
    pub gbps: f64,
}

/// A verdict about the fabric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Localised {
    /// The node is below the floor with every reference partner: a node fault (its NIC, its
    /// cable, its PCIe path).
    Node {
        /// The node (rank).
        node: usize,
        /// Its pairs with reference partners, all below the floor (Gb/s).
        evidence: Vec<PairResult>,
    },
    /// The pair is below the floor while each node is fine with reference partners: the link or
    /// the fabric between them.
    Link {
        /// The lower rank of the pair.
        a: usize,
        /// The higher rank of the pair.
        b: usize,
        /// The slow pair first, then up to two good pairs of each node (Gb/s).
        evidence: Vec<PairResult>,
    },
    /// The node is in a slow pair but the figures cannot say whether it is at fault.
    Undecided {
        /// The node (rank).
        node: usize,
        /// Why not, in words.
        why: String,
    },
    /// No pair reaches the floor: a problem of the whole fabric (a switch, routing, a setting
    /// common to every node), not of one node.
    Fabric {
        /// Pairs below the floor.
        slow_pairs: usize,
        /// Pairs measured.
        pairs: usize,
        /// When the fabric splits the nodes: the groups (ranks) fine among themselves and below
        /// the floor across. Empty when no pair reaches the floor at all.
        groups: Vec<Vec<usize>>,
        /// What this means, in words.
        why: String,
    },
}

/// Whether a figure is below the floor (a figure that is not a number counts as slow).
fn slow(gbps: f64, floor: f64) -> bool {
    gbps.is_nan() || gbps < floor
}

/// The nodes in at least one pair below `floor` (a figure that is not a number counts as
/// below), sorted.
pub fn suspects(first: &[PairResult], floor: f64) -> Vec<usize> {
    let set: BTreeSet<usize> = first
        .iter()
        .filter(|p| slow(p.gbps, floor))
        .flat_map(|p| [p.a, p.b])
        .collect();
    set.into_iter().collect()
}

/// The nodes `0..n` in no pair below `floor`, sorted (those measured in no pair too).
pub fn passing(first: &[PairResult], floor: f64, n: usize) -> Vec<usize> {
    let bad: BTreeSet<usize> = suspects(first, floor).into_iter().collect();
    (0..n).filter(|v| !bad.contains(v)).collect()
}

/// The second pass: each suspect with two distinct passing nodes (fewer when fewer pass; the
/// verdict then says so), the least used passing nodes first, in rounds where no node is in
/// two pairs. Suspects or passing nodes not below `n`, and passing nodes that are suspects, are
/// left out.
pub fn second_pass(suspects: &[usize], passing: &[usize], n: usize) -> Vec<Vec<(usize, usize)>> {
    let sus: BTreeSet<usize> = suspects.iter().copied().filter(|&s| s < n).collect();
    let good: BTreeSet<usize> = passing
        .iter()
        .copied()
        .filter(|&g| g < n && !sus.contains(&g))
        .collect();
    let mut load: BTreeMap<usize, usize> = good.iter().map(|&g| (g, 0)).collect();
    let mut pairs = Vec::new();
    for &s in &sus {
        let mut by_load: Vec<(usize, usize)> = load.iter().map(|(&g, &l)| (l, g)).collect();
        by_load.sort_unstable();
        for &(_, g) in by_load.iter().take(2) {
            if let Some(l) = load.get_mut(&g) {
                *l += 1;
            }
            pairs.push((s.min(g), s.max(g)));
        }
    }
    schedule(&pairs)
}

/// Put pairs in rounds, each in the first round where neither of its nodes is busy.
fn schedule(pairs: &[(usize, usize)]) -> Vec<Vec<(usize, usize)>> {
    let mut busy: Vec<BTreeSet<usize>> = Vec::new();
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    for &(a, b) in pairs {
        match busy
            .iter()
            .position(|used| !used.contains(&a) && !used.contains(&b))
        {
            Some(i) => {
                busy[i].extend([a, b]);
                rounds[i].push((a, b));
            }
            None => {
                busy.push(BTreeSet::from([a, b]));
                rounds.push(vec![(a, b)]);
            }
        }
    }
    rounds
}

/// Check figures and the floor: numbers, not negative, two distinct nodes per pair.
fn validate(what: &str, results: &[PairResult]) -> Result<(), String> {
    for p in results {
        if !p.gbps.is_finite() || p.gbps < 0.0 {
            return Err(format!(
                "{what}: pair {}-{} measured {} Gb/s: not a bandwidth",
                p.a, p.b, p.gbps
            ));
        }
        if p.a == p.b {
            return Err(format!("{what}: pair {}-{} is one node twice", p.a, p.b));
        }
    }
    Ok(())
}

/// The figures by pair `(low, high)`: the lowest of repeats within a pass, the second pass's
/// over the first's.
fn merge(first: &[PairResult], second: &[PairResult]) -> BTreeMap<(usize, usize), f64> {
    let lowest = |list: &[PairResult]| {
        let mut m: BTreeMap<(usize, usize), f64> = BTreeMap::new();
        for p in list {
            let k = (p.a.min(p.b), p.a.max(p.b));
            let e = m.entry(k).or_insert(p.gbps);
            *e = e.min(p.gbps);
        }
        m
    };
    let mut all = lowest(first);
    all.extend(lowest(second));
    all
}

/// What a node's pairs say about it.
#[derive(Debug, Clone, PartialEq)]
enum Class {
    /// Fine with reference partners: its slow pairs are links (or the other node's fault).
    Fine,
    /// A node fault.
    Faulty,
    /// Cannot tell.
    Unsure,
}

/// The verdicts from the first pass and the second (possibly empty), against `floor` (Gb/s):
/// node faults by node, then link suspects by pair, then undecided nodes; or one fabric-wide
/// verdict; empty when no pair is below the floor.
pub fn judge(
    first: &[PairResult],
    second: &[PairResult],
    floor: f64,
) -> Result<Vec<Localised>, String> {
    if !floor.is_finite() || floor <= 0.0 {
        return Err(format!(
            "floor {floor} Gb/s: a floor must be a positive number"
        ));
    }
    validate("first pass", first)?;
    validate("second pass", second)?;
    let figures = merge(first, second);
    let pr = |&(a, b): &(usize, usize), gbps: f64| PairResult { a, b, gbps };
    let slow_pairs: Vec<PairResult> = figures
        .iter()
        .filter(|(_, &g)| slow(g, floor))
        .map(|(k, &g)| pr(k, g))
        .collect();
    if slow_pairs.is_empty() {
        return Ok(Vec::new());
    }
    let nodes: BTreeSet<usize> = figures.keys().flat_map(|&(a, b)| [a, b]).collect();
    if nodes.len() == 2 {
        let p = slow_pairs[0];
        let why = format!(
            "two nodes only: one slow pair ({} Gb/s, floor {}) cannot tell a node from the \
             link between them; add a third node",
            fmt_num(p.gbps),
            fmt_num(floor)
        );
        return Ok(nodes
            .into_iter()
            .map(|node| Localised::Undecided {
                node,
                why: why.clone(),
            })
            .collect());
    }
    let reference: BTreeSet<usize> = figures
        .iter()
        .filter(|(_, &g)| !slow(g, floor))
        .flat_map(|(&(a, b), _)| [a, b])
        .collect();
    if reference.is_empty() {
        return Ok(vec![Localised::Fabric {
            slow_pairs: slow_pairs.len(),
            pairs: figures.len(),
            groups: Vec::new(),
            why: format!(
                "no pair of {} nodes reaches {} Gb/s: a fabric-wide problem (a switch, \
                 routing, or a setting every node shares), not one node",
                nodes.len(),
                fmt_num(floor)
            ),
        }]);
    }
    // Each node's pairs with reference partners: (fast, slow).
    // Each node's pairs, once (a node's pairs are then read without scanning every pair).
    let mut adj: BTreeMap<usize, Vec<PairResult>> = BTreeMap::new();
    for (k, &g) in &figures {
        adj.entry(k.0).or_default().push(pr(k, g));
        adj.entry(k.1).or_default().push(pr(k, g));
    }
    let with_refs = |v: usize| {
        let mut fast = Vec::new();
        let mut slow_ = Vec::new();
        for p in adj.get(&v).map_or(&[][..], Vec::as_slice) {
            let other = if p.a == v { p.b } else { p.a };
            if reference.contains(&other) {
                if slow(p.gbps, floor) {
                    slow_.push(*p);
                } else {
                    fast.push(*p);
                }
            }
        }
        (fast, slow_)
    };
    let in_slow: BTreeSet<usize> = slow_pairs.iter().flat_map(|p| [p.a, p.b]).collect();
    let mut class: BTreeMap<usize, Class> = BTreeMap::new();
    let (mut faults, mut links, mut undecided) = (Vec::new(), Vec::new(), Vec::new());
    for &v in &nodes {
        let (fast, slow_) = with_refs(v);
        let c = if fast.is_empty() && slow_.len() >= 2 {
            faults.push(Localised::Node {
                node: v,
                evidence: slow_,
            });
            Class::Faulty
        } else if fast.is_empty() {
            if in_slow.contains(&v) {
                undecided.push(Localised::Undecided {
                    node: v,
                    why: format!(
                        "in a slow pair, but measured with {} node(s) that reach the floor \
                         (two are needed to blame the node rather than a link)",
                        slow_.len()
                    ),
                });
            }
            Class::Unsure
        } else if slow_.len() > fast.len() {
            undecided.push(Localised::Undecided {
                node: v,
                why: format!(
                    "below the floor with {} of {} partners that reach it elsewhere: a node \
                     fault that comes and goes, or several bad links; measure again",
                    slow_.len(),
                    slow_.len() + fast.len()
                ),
            });
            Class::Unsure
        } else {
            Class::Fine
        };
        class.insert(v, c);
    }
    let faulty: BTreeSet<usize> = class
        .iter()
        .filter(|(_, c)| **c == Class::Faulty)
        .map(|(&v, _)| v)
        .collect();
    if let Some(groups) = split(&figures, floor, &nodes, &faulty) {
        let across = slow_pairs
            .iter()
            .filter(|p| !faulty.contains(&p.a) && !faulty.contains(&p.b))
            .count();
        let names: Vec<String> = groups
            .iter()
            .map(|g| {
                let v: Vec<String> = g.iter().map(usize::to_string).collect();
                format!("{{{}}}", v.join(", "))
            })
            .collect();
        faults.push(Localised::Fabric {
            slow_pairs: across,
            pairs: figures.len(),
            why: format!(
                "the nodes fall into {} groups that reach {} Gb/s among themselves and not \
                 across ({}): a switch or a route between the groups, not the nodes",
                groups.len(),
                fmt_num(floor),
                names.join(" | ")
            ),
            groups,
        });
        return Ok(faults);
    }
    let fine = |v: usize| class.get(&v) == Some(&Class::Fine);
    for p in &slow_pairs {
        if fine(p.a) && fine(p.b) {
            let mut evidence = vec![*p];
            for v in [p.a, p.b] {
                evidence.extend(with_refs(v).0.into_iter().take(2));
            }
            links.push(Localised::Link {
                a: p.a,
                b: p.b,
                evidence,
            });
        }
    }
    faults.extend(links);
    faults.extend(undecided);
    Ok(faults)
}

/// When the fabric splits the nodes: the groups that the pairs at the floor connect (node
/// faults left out), if there are two or more, every node not at fault is in one of at least
/// two nodes, and every slow pair (node faults aside) runs between groups.
fn split(
    figures: &BTreeMap<(usize, usize), f64>,
    floor: f64,
    nodes: &BTreeSet<usize>,
    faulty: &BTreeSet<usize>,
) -> Option<Vec<Vec<usize>>> {
    // Connected components of the fast pairs, by repeated merging of labels (small n).
    let mut label: BTreeMap<usize, usize> = nodes
        .iter()
        .filter(|v| !faulty.contains(v))
        .map(|&v| (v, v))
        .collect();
    let healthy = |a: &usize, b: &usize| !faulty.contains(a) && !faulty.contains(b);
    loop {
        let mut changed = false;
        for (&(a, b), &g) in figures {
            if slow(g, floor) || !healthy(&a, &b) {
                continue;
            }
            let (la, lb) = (label.get(&a).copied()?, label.get(&b).copied()?);
            if la != lb {
                let (keep, drop) = (la.min(lb), la.max(lb));
                for l in label.values_mut() {
                    if *l == drop {
                        *l = keep;
                    }
                }
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (&v, &l) in &label {
        groups.entry(l).or_default().push(v);
    }
    let groups: Vec<Vec<usize>> = groups.into_values().collect();
    if groups.len() < 2 || groups.iter().any(|g| g.len() < 2) {
        return None;
    }
    let within = figures
        .iter()
        .any(|(&(a, b), &g)| slow(g, floor) && healthy(&a, &b) && label.get(&a) == label.get(&b));
    (!within).then_some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::pairwise::rounds;

    /// Every pair of `n` nodes with the figure `f(a, b)`.
    fn all_pairs(n: usize, f: impl Fn(usize, usize) -> f64) -> Vec<PairResult> {
        rounds(n)
            .into_iter()
            .flatten()
            .map(|(a, b)| PairResult {
                a,
                b,
                gbps: f(a, b),
            })
            .collect()
    }

    /// Per-node NIC bandwidth: a pair gets the lower of its two.
    fn nics(bw: &[f64]) -> Vec<PairResult> {
        all_pairs(bw.len(), |a, b| bw[a].min(bw[b]))
    }

    fn kinds(v: &[Localised]) -> Vec<String> {
        v.iter()
            .map(|l| match l {
                Localised::Node { node, .. } => format!("node {node}"),
                Localised::Link { a, b, .. } => format!("link {a}-{b}"),
                Localised::Undecided { node, .. } => format!("undecided {node}"),
                Localised::Fabric { .. } => "fabric".into(),
            })
            .collect()
    }

    #[test]
    fn all_fine_is_no_verdict() {
        let first = nics(&[400.0; 5]);
        assert!(suspects(&first, 300.0).is_empty());
        assert_eq!(passing(&first, 300.0, 5), vec![0, 1, 2, 3, 4]);
        assert!(second_pass(&[], &[0, 1], 5).is_empty());
        assert_eq!(judge(&first, &[], 300.0), Ok(vec![]));
    }

    #[test]
    fn one_slow_node_is_a_node_fault() {
        for n in 3..=9 {
            let mut bw = vec![400.0; n];
            bw[2] = 200.0;
            let first = nics(&bw);
            // Every node has a slow pair (with node 2): all are suspects, none passes.
            assert_eq!(suspects(&first, 300.0), (0..n).collect::<Vec<_>>());
            assert!(passing(&first, 300.0, n).is_empty());
            let v = judge(&first, &[], 300.0).unwrap();
            assert_eq!(kinds(&v), ["node 2"], "n={n}");
            let Localised::Node { evidence, .. } = &v[0] else {
                unreachable!()
            };
            assert_eq!(evidence.len(), n - 1);
            assert!(evidence
                .iter()
                .all(|p| p.gbps == 200.0 && (p.a == 2 || p.b == 2)));
        }
    }

    #[test]
    fn two_slow_nodes_are_two_node_faults() {
        let first = nics(&[400.0, 100.0, 400.0, 400.0, 150.0, 400.0]);
        assert_eq!(
            kinds(&judge(&first, &[], 300.0).unwrap()),
            ["node 1", "node 4"]
        );
    }

    #[test]
    fn one_slow_pair_is_a_link() {
        for n in 3..=9 {
            let first = all_pairs(n, |a, b| if (a, b) == (0, 2) { 90.0 } else { 400.0 });
            let sus = suspects(&first, 300.0);
            assert_eq!(sus, vec![0, 2]);
            let pass = passing(&first, 300.0, n);
            let second: Vec<PairResult> = second_pass(&sus, &pass, n)
                .into_iter()
                .flatten()
                .map(|(a, b)| PairResult { a, b, gbps: 400.0 })
                .collect();
            let v = judge(&first, &second, 300.0).unwrap();
            assert_eq!(kinds(&v), ["link 0-2"], "n={n}");
            let Localised::Link { evidence, .. } = &v[0] else {
                unreachable!()
            };
            assert_eq!(
                evidence[0],
                PairResult {
                    a: 0,
                    b: 2,
                    gbps: 90.0
                }
            );
            assert!(evidence.len() >= 3, "{evidence:?}");
        }
    }

    #[test]
    fn two_nodes_cannot_be_told_apart() {
        let first = [PairResult {
            a: 0,
            b: 1,
            gbps: 50.0,
        }];
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(kinds(&v), ["undecided 0", "undecided 1"]);
        let Localised::Undecided { why, .. } = &v[0] else {
            unreachable!()
        };
        assert!(why.starts_with("two nodes only"), "{why}");
        assert_eq!(
            judge(
                &[PairResult {
                    a: 0,
                    b: 1,
                    gbps: 500.0
                }],
                &[],
                300.0
            ),
            Ok(vec![])
        );
    }

    #[test]
    fn everything_slow_is_the_fabric_not_every_node() {
        let first = nics(&[100.0; 6]);
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(v.len(), 1);
        let Localised::Fabric {
            slow_pairs,
            pairs,
            why,
            ..
        } = &v[0]
        else {
            panic!("{v:?}")
        };
        assert_eq!((*slow_pairs, *pairs), (15, 15));
        assert!(why.contains("fabric-wide"), "{why}");
    }

    #[test]
    fn too_few_references_is_undecided_and_says_why() {
        // Three nodes, two of them slow: only node 0 could be a reference, and it has no
        // fast pair, so nothing reaches the floor: the fabric verdict.
        let first = nics(&[400.0, 100.0, 100.0]);
        assert_eq!(kinds(&judge(&first, &[], 300.0).unwrap()), ["fabric"]);
        // Four nodes: 0-1 fine, everything with 2 or 3 slow, and 2-3 not measured. Nodes 2
        // and 3 each have two slow reference partners: node faults.
        let first: Vec<PairResult> = [(0, 1, 400.0), (0, 2, 10.0), (1, 2, 10.0), (0, 3, 10.0)]
            .map(|(a, b, gbps)| PairResult { a, b, gbps })
            .to_vec();
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(kinds(&v), ["node 2", "undecided 3"]);
        let Localised::Undecided { why, .. } = &v[1] else {
            unreachable!()
        };
        assert!(why.contains("measured with 1 node(s)"), "{why}");
    }

    #[test]
    fn a_split_fabric_is_named_by_its_groups() {
        // Two racks of three: fine inside, slow across (a spine link or a routing problem).
        let rack = |v: usize| v / 3;
        let first = all_pairs(6, |a, b| if rack(a) == rack(b) { 400.0 } else { 120.0 });
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(v.len(), 1, "{v:?}");
        let Localised::Fabric {
            slow_pairs,
            pairs,
            groups,
            why,
        } = &v[0]
        else {
            panic!("{v:?}")
        };
        assert_eq!((*slow_pairs, *pairs), (9, 15));
        assert_eq!(groups, &vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert!(why.contains("({0, 1, 2} | {3, 4, 5})"), "{why}");
        // Uneven racks, and a slow node on top: the node fault, then the split.
        let rack = |v: usize| usize::from(v >= 5);
        let first = all_pairs(8, |a, b| match (a, b) {
            _ if a == 2 || b == 2 => 50.0,
            _ if rack(a) == rack(b) => 400.0,
            _ => 120.0,
        });
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(kinds(&v), ["node 2", "fabric"]);
        let Localised::Fabric { groups, .. } = &v[1] else {
            unreachable!()
        };
        assert_eq!(groups, &vec![vec![0, 1, 3, 4], vec![5, 6, 7]]);
        // A slow pair inside a group too: not a clean split, judged pair by pair.
        let first = all_pairs(6, |a, b| match (a, b) {
            (0, 1) => 100.0,
            _ if a / 3 == b / 3 => 400.0,
            _ => 120.0,
        });
        let v = judge(&first, &[], 300.0).unwrap();
        assert!(!kinds(&v).contains(&"fabric".to_string()), "{v:?}");
    }

    #[test]
    fn five_hundred_nodes_are_judged_quickly() {
        let mut bw = vec![400.0; 512];
        bw[317] = 100.0;
        let first = nics(&bw);
        let t0 = std::time::Instant::now();
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(kinds(&v), ["node 317"]);
        // Seconds, not minutes, even unoptimised (130,816 pairs; MAX_PAIRWISE allows 523,776).
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn slow_with_most_partners_is_undecided() {
        // Node 0 is slow with 1, 2, 3 but fine with 4: not clean enough to blame it or links.
        let first = all_pairs(5, |a, b| if a == 0 && b != 4 { 50.0 } else { 400.0 });
        let v = judge(&first, &[], 300.0).unwrap();
        assert_eq!(kinds(&v), ["undecided 0"]);
    }

    #[test]
    fn the_second_pass_wins_over_the_first() {
        // 0-2 was slow in the busy first pass but is fine measured again alone.
        let first = all_pairs(4, |a, b| if (a, b) == (0, 2) { 90.0 } else { 400.0 });
        let second = [PairResult {
            a: 2,
            b: 0,
            gbps: 390.0,
        }];
        assert_eq!(judge(&first, &second, 300.0), Ok(vec![]));
    }

    #[test]
    fn bad_figures_are_errors_not_verdicts() {
        let ok = [PairResult {
            a: 0,
            b: 1,
            gbps: 1.0,
        }];
        for g in [f64::NAN, -1.0, f64::INFINITY] {
            let bad = [PairResult {
                a: 0,
                b: 1,
                gbps: g,
            }];
            let e = judge(&bad, &[], 300.0).unwrap_err();
            assert!(
                e.contains("first pass: pair 0-1") && e.contains("not a bandwidth"),
                "{e}"
            );
            let e = judge(&ok, &bad, 300.0).unwrap_err();
            assert!(e.starts_with("second pass"), "{e}");
        }
        for f in [0.0, -3.0, f64::NAN] {
            assert!(judge(&ok, &[], f).unwrap_err().contains("floor"));
        }
        let same = [PairResult {
            a: 3,
            b: 3,
            gbps: 1.0,
        }];
        assert!(judge(&same, &[], 300.0)
            .unwrap_err()
            .contains("one node twice"));
        // A figure that is not a number makes its nodes suspects.
        assert_eq!(
            suspects(
                &[PairResult {
                    a: 0,
                    b: 4,
                    gbps: f64::NAN
                }],
                1.0
            ),
            [0, 4]
        );
    }

    #[test]
    fn second_pass_pairs_each_suspect_with_two_spread_partners() {
        let rounds = second_pass(&[1, 3, 5], &[0, 2, 4, 6], 7);
        let pairs: Vec<(usize, usize)> = rounds.iter().flatten().copied().collect();
        assert_eq!(pairs.len(), 6);
        for s in [1, 3, 5] {
            let partners: BTreeSet<usize> = pairs
                .iter()
                .filter_map(|&(a, b)| match s {
                    x if x == a => Some(b),
                    x if x == b => Some(a),
                    _ => None,
                })
                .collect();
            assert_eq!(partners.len(), 2, "suspect {s}: {pairs:?}");
            assert!(partners.iter().all(|p| [0, 2, 4, 6].contains(p)));
        }
        // Spread: no passing node carries more than two of the six pairs.
        for g in [0, 2, 4, 6] {
            let uses = pairs.iter().filter(|&&(a, b)| a == g || b == g).count();
            assert!(uses <= 2, "node {g} used {uses} times");
        }
        for round in &rounds {
            let mut busy = BTreeSet::new();
            for &(a, b) in round {
                assert!(a < b && busy.insert(a) && busy.insert(b), "{round:?}");
            }
        }
        // Not enough passing nodes: fewer partners; suspects never partner each other; out of
        // range is left out.
        assert_eq!(
            second_pass(&[0, 1], &[1, 2], 3),
            vec![vec![(0, 2)], vec![(1, 2)]]
        );
        assert!(second_pass(&[0], &[], 3).is_empty());
        assert!(second_pass(&[9], &[0, 1], 3).is_empty());
    }

    #[test]
    fn verdicts_serialise_in_snake_case() {
        let v = Localised::Node {
            node: 2,
            evidence: vec![PairResult {
                a: 0,
                b: 2,
                gbps: 200.0,
            }],
        };
        let j = serde_json::to_string(&v).unwrap();
        assert_eq!(
            j,
            r#"{"kind":"node","node":2,"evidence":[{"a":0,"b":2,"gbps":200.0}]}"#
        );
        let back: Localised = serde_json::from_str(&j).unwrap();
        assert_eq!(back, v);
        let u = serde_json::to_value(Localised::Undecided {
            node: 1,
            why: "x".into(),
        })
        .unwrap();
        assert_eq!(u["kind"], "undecided");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn figure() -> impl Strategy<Value = f64> {
            prop_oneof![
                4 => 0.0..800.0f64,
                1 => any::<f64>(),
                1 => Just(f64::NAN),
                1 => Just(-1.0),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn judge_never_panics(
                first in proptest::collection::vec((0usize..12, 0usize..12, figure()), 0..60),
                second in proptest::collection::vec((0usize..12, 0usize..12, figure()), 0..12),
                floor in prop_oneof![1.0..800.0f64, any::<f64>()],
            ) {
                let as_pairs = |v: &[(usize, usize, f64)]| -> Vec<PairResult> {
                    v.iter().map(|&(a, b, gbps)| PairResult { a, b, gbps }).collect()
                };
                let (first, second) = (as_pairs(&first), as_pairs(&second));
                let _ = judge(&first, &second, floor);
                let sus = suspects(&first, floor);
                let _ = second_pass(&sus, &passing(&first, floor, 12), 12);
            }

            #[test]
            fn one_slow_nic_is_always_that_node(
                fine in proptest::collection::vec(350.0..500.0f64, 2..12),
                slow_bw in 0.0..250.0f64,
                at in any::<prop::sample::Index>(),
            ) {
                let mut bw = fine;
                let k = at.index(bw.len() + 1);
                bw.insert(k, slow_bw);
                let v = judge(&nics(&bw), &[], 300.0).unwrap();
                prop_assert_eq!(kinds(&v), vec![format!("node {k}")]);
            }

            #[test]
            fn one_slow_link_is_always_that_link(
                n in 3usize..12,
                pick in any::<(prop::sample::Index, prop::sample::Index)>(),
                slow_bw in 0.0..250.0f64,
            ) {
                let a = pick.0.index(n);
                let b = (a + 1 + pick.1.index(n - 1)) % n;
                let (a, b) = (a.min(b), a.max(b));
                let first = all_pairs(n, |x, y| if (x, y) == (a, b) { slow_bw } else { 400.0 });
                let sus = suspects(&first, 300.0);
                let second: Vec<PairResult> = second_pass(&sus, &passing(&first, 300.0, n), n)
                    .into_iter()
                    .flatten()
                    .map(|(x, y)| PairResult { a: x, b: y, gbps: 400.0 })
                    .collect();
                let v = judge(&first, &second, 300.0).unwrap();
                prop_assert_eq!(kinds(&v), vec![format!("link {a}-{b}")]);
            }

            #[test]
            fn second_pass_gives_each_suspect_distinct_passing_partners(
                n in 1usize..20,
                sus in proptest::collection::btree_set(0usize..24, 0..8),
                pass in proptest::collection::btree_set(0usize..24, 0..8),
            ) {
                let sus_v: Vec<usize> = sus.iter().copied().collect();
                let pass_v: Vec<usize> = pass.iter().copied().collect();
                let rounds = second_pass(&sus_v, &pass_v, n);
                let usable = pass.iter().filter(|&&g| g < n && !sus.contains(&g)).count();
                for round in &rounds {
                    let mut busy = BTreeSet::new();
                    for &(x, y) in round {
                        prop_assert!(x < y && y < n);
                        prop_assert!(busy.insert(x) && busy.insert(y));
                    }
                }
                let pairs: Vec<(usize, usize)> = rounds.into_iter().flatten().collect();
                for &s in sus.iter().filter(|&&s| s < n) {
                    let partners: BTreeSet<usize> = pairs
                        .iter()
                        .filter_map(|&(x, y)| match s {
                            v if v == x => Some(y),
                            v if v == y => Some(x),
                            _ => None,
                        })
                        .collect();
                    prop_assert_eq!(partners.len(), usable.min(2));
                    prop_assert!(partners.iter().all(|g| pass.contains(g) && !sus.contains(g)));
                }
            }
        }
    }
}
