//! All node pairs in rounds: the circle method of a round-robin tournament (as SuperBench's
//! pair-wise traffic pattern). With n nodes, n-1 rounds of n/2 pairs when n is even; n rounds
//! of (n-1)/2 pairs when n is odd (one node sits out each round). Every unordered pair comes
//! exactly once and no node is in two pairs of one round, so the pairs of a round can be
//! measured at the same time.

/// The rounds for `n` nodes, each a list of pairs `(low, high)`. No rounds for 0 or 1 node
/// (there is no pair to measure).
pub fn rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // An odd count gets a phantom node `n`: whoever meets it sits the round out.
    let m = if n % 2 == 0 { n } else { n + 1 };
    let turning = m - 1; // nodes 0..m-1 turn around the circle, node m-1 stays put
    (0..turning)
        .map(|r| {
            let mut round = Vec::with_capacity(m / 2);
            let fixed = (m - 1, r);
            let others = (1..m / 2).map(|i| ((r + i) % turning, (r + turning - i) % turning));
            for (a, b) in std::iter::once(fixed).chain(others) {
                if a < n && b < n {
                    round.push((a.min(b), a.max(b)));
                }
            }
            round.sort_unstable();
            round
        })
        .collect()
}

/// The pair this node is in during `round`, as its peer; `None` when it sits out.
pub fn peer_in(round: &[(usize, usize)], node: usize) -> Option<usize> {
    round.iter().find_map(|&(a, b)| match node {
        x if x == a => Some(b),
        x if x == b => Some(a),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn circle_method_properties_for_1_to_17_nodes() {
        assert!(rounds(0).is_empty());
        assert!(rounds(1).is_empty());
        for n in 2..=17 {
            let rs = rounds(n);
            let want_rounds = if n % 2 == 0 { n - 1 } else { n };
            assert_eq!(rs.len(), want_rounds, "n={n}");
            let mut seen = BTreeSet::new();
            for (i, round) in rs.iter().enumerate() {
                assert_eq!(round.len(), n / 2, "n={n} round {i}");
                let mut busy = BTreeSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n, "n={n} round {i}: ({a}, {b})");
                    assert!(
                        busy.insert(a) && busy.insert(b),
                        "n={n} round {i}: node twice"
                    );
                    assert!(seen.insert((a, b)), "n={n}: ({a}, {b}) twice");
                }
                if n % 2 == 1 {
                    assert_eq!(busy.len(), n - 1, "n={n} round {i}: exactly one sits out");
                }
            }
            assert_eq!(seen.len(), n * (n - 1) / 2, "n={n}: every pair once");
            // Odd n: every node sits out exactly once.
            if n % 2 == 1 {
                for node in 0..n {
                    let out = rs.iter().filter(|r| peer_in(r, node).is_none()).count();
                    assert_eq!(out, 1, "n={n} node {node}");
                }
            }
        }
    }

    #[test]
    fn small_cases_by_hand() {
        assert_eq!(rounds(2), vec![vec![(0, 1)]]);
        assert_eq!(
            rounds(4),
            vec![
                vec![(0, 3), (1, 2)],
                vec![(0, 2), (1, 3)],
                vec![(0, 1), (2, 3)]
            ]
        );
        assert_eq!(peer_in(&[(0, 3), (1, 2)], 2), Some(1));
        assert_eq!(peer_in(&[(0, 3), (1, 2)], 3), Some(0));
        assert_eq!(peer_in(&[(0, 3)], 1), None);
    }
}
