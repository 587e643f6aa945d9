//! The whole pair-wise fabric test on one rank: measure every node pair in rounds, gather the
//! figures on rank 0, measure the suspects again with passing nodes, and judge.
//!
//! The measurement is a function of the peer's rank, so that the same flow runs with modelled
//! figures (tests, `--simulate`) and with real GPUs: there `measure` is an NCCL send/recv
//! between this node and the peer over InfiniBand or RoCE, which needs a real multi-node
//! cluster. `measure` must keep its own deadline (the flow checks the overall one between
//! rounds, it cannot interrupt a measurement).

use super::localise::{judge, passing, second_pass, suspects, Localised, PairResult};
use super::pairwise::{peer_in, rounds};
use super::rendezvous::Session;
use super::FabricError;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The most nodes one pair-wise test takes: n(n-1)/2 pairs in n-1 rounds (1024 nodes: 523,776
/// pairs, 1023 rounds). A larger fleet is split into groups first.
pub const MAX_PAIRWISE: usize = 1024;

/// What one rank measured in one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Report {
    /// The peer this rank measured with; `None` when it sat the round out.
    peer: Option<usize>,
    /// The figure, in Gb/s, when the measurement worked.
    gbps: Option<f64>,
    /// Why the measurement failed, when it did.
    error: Option<String>,
}

/// Run `schedule` (rounds of pairs, the same on every rank): in each round this rank measures
/// with its peer, if it has one; rank 0 gathers every rank's report after each round (so the
/// pairs of a round run together) and gets the figure of each pair, the lower of what its two
/// nodes saw. Rank 0 then lets every rank on to the next round. A failed measurement or a
/// figure that is not a bandwidth stops the run on every rank, naming the rank and its peer.
fn measure_rounds(
    session: &mut Session,
    schedule: &[Vec<(usize, usize)>],
    measure: &mut dyn FnMut(usize) -> Result<f64, String>,
    deadline: Instant,
) -> Result<Vec<PairResult>, FabricError> {
    let me = session.rank();
    let mut out = Vec::new();
    for (i, round) in schedule.iter().enumerate() {
        if Instant::now() >= deadline {
            let why = format!(
                "round {} of {} not started by the deadline",
                i + 1,
                schedule.len()
            );
            session.abort(&why);
            return Err(FabricError::Local {
                what: "pair-wise fabric test".into(),
                detail: why,
            });
        }
        let peer = peer_in(round, me);
        let report = match peer.map(&mut *measure) {
            None => Report {
                peer: None,
                gbps: None,
                error: None,
            },
            // Checked here: JSON has no NaN or infinity (they would arrive as "no figure").
            Some(Ok(g)) if !g.is_finite() || g < 0.0 => Report {
                peer,
                gbps: None,
                error: Some(format!("measured {g} Gb/s, not a bandwidth")),
            },
            Some(Ok(g)) => Report {
                peer,
                gbps: Some(g),
                error: None,
            },
            Some(Err(e)) => Report {
                peer,
                gbps: None,
                error: Some(e),
            },
        };
        if let Some(all) = session.gather(report, deadline)? {
            match figures(round, &all, session.hosts()) {
                Ok(pairs) => out.extend(pairs),
                Err(why) => {
                    session.abort(&why);
                    return Err(FabricError::Invalid(why));
                }
            }
        }
        // Nobody starts the next round before every pair of this one is done; a rank that
        // failed is heard here, as an abort instead of the go.
        let go = (session.rank() == 0).then_some(i);
        session.broadcast(go, deadline)?;
    }
    Ok(out)
}

/// The figure of each pair of a round from every rank's report (index = rank): the lower of
/// its two nodes' figures. An error names the rank, its host and its peer.
fn figures(
    round: &[(usize, usize)],
    reports: &[Report],
    hosts: &[String],
) -> Result<Vec<PairResult>, String> {
    let who = |r: usize| super::world::who(hosts, r);
    for (r, rep) in reports.iter().enumerate() {
        let want = peer_in(round, r);
        if rep.peer != want {
            return Err(format!(
                "{} measured with {:?} when the schedule said {:?}",
                who(r),
                rep.peer,
                want
            ));
        }
        if let (Some(p), Some(e)) = (rep.peer, &rep.error) {
            return Err(format!("{} measuring with {}: {e}", who(r), who(p)));
        }
        if let (Some(p), Some(g)) = (rep.peer, rep.gbps) {
            if !g.is_finite() || g < 0.0 {
                return Err(format!(
                    "{} measuring with {}: {g} Gb/s is not a bandwidth",
                    who(r),
                    who(p)
                ));
            }
        }
    }
    round
        .iter()
        .map(|&(a, b)| {
            let side = |r: usize| reports.get(r).and_then(|x| x.gbps);
            match (side(a), side(b)) {
                (Some(x), Some(y)) => Ok(PairResult {
                    a,
                    b,
                    gbps: x.min(y),
                }),
                (Some(x), None) | (None, Some(x)) => Ok(PairResult { a, b, gbps: x }),
                (None, None) => Err(format!(
                    "pair {}-{}: no figure from either node",
                    who(a),
                    who(b)
                )),
            }
        })
        .collect()
}

/// What rank 0 tells every rank after the first pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Plan {
    /// The second pass's rounds of pairs.
    second: Vec<Vec<(usize, usize)>>,
}

/// What rank 0 knows at the end of a pair-wise test: the figures as measured and the verdicts,
/// for the evidence (a chart per pair, a verdict that shows its figures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pairwise {
    /// The least a pair must reach, in Gb/s.
    pub floor_gbps: f64,
    /// Every pair of the first pass, by round, in Gb/s (the lower of its two nodes' figures).
    pub first: Vec<PairResult>,
    /// The second pass (suspects with passing nodes), in Gb/s; empty when nothing was slow or
    /// no node passed.
    pub second: Vec<PairResult>,
    /// The verdicts ([`judge`]); empty when every pair reached the floor.
    pub verdicts: Vec<Localised>,
}

/// The pair-wise fabric test on this rank, after the rendezvous: every pair in rounds
/// ([`rounds`]), then the suspects again with passing nodes ([`second_pass`], scheduled by rank
/// 0 and broadcast), then rank 0 judges ([`judge`]) and returns `Some(verdicts)`; the other
/// ranks return `None`. `measure(peer)` gives this node's figure with the peer in Gb/s; `floor`
/// is the least a pair must reach, in Gb/s; `deadline` bounds every wait. Any rank's failure
/// stops every rank with an error that names it.
pub fn run_pairwise(
    session: &mut Session,
    measure: &mut dyn FnMut(usize) -> Result<f64, String>,
    floor: f64,
    deadline: Instant,
) -> Result<Option<Vec<Localised>>, FabricError> {
    Ok(run_pairwise_figures(session, measure, floor, deadline)?.map(|p| p.verdicts))
}

/// [`run_pairwise`], with the figures: rank 0 gets `Some(Pairwise)`, the others `None`.
pub fn run_pairwise_figures(
    session: &mut Session,
    measure: &mut dyn FnMut(usize) -> Result<f64, String>,
    floor: f64,
    deadline: Instant,
) -> Result<Option<Pairwise>, FabricError> {
    if !floor.is_finite() || floor <= 0.0 {
        let why = format!("floor {floor} Gb/s: a floor must be a positive number");
        return Err(FabricError::Invalid(why));
    }
    let n = session.size();
    if n > MAX_PAIRWISE {
        return Err(FabricError::Invalid(format!(
            "a pair-wise test of {n} nodes ({} pairs): at most {MAX_PAIRWISE} nodes, split the \
             fleet into groups",
            n * (n - 1) / 2
        )));
    }
    let first = measure_rounds(session, &rounds(n), measure, deadline)?;
    let plan = (session.rank() == 0).then(|| {
        let sus = suspects(&first, floor);
        Plan {
            second: second_pass(&sus, &passing(&first, floor, n), n),
        }
    });
    let plan: Plan = session.broadcast(plan, deadline)?;
    let second = measure_rounds(session, &plan.second, measure, deadline)?;
    if session.rank() != 0 {
        return Ok(None);
    }
    match judge(&first, &second, floor) {
        Ok(verdicts) => Ok(Some(Pairwise {
            floor_gbps: floor,
            first,
            second,
            verdicts,
        })),
        Err(why) => Err(FabricError::Invalid(why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i}")).collect()
    }

    fn rep(peer: Option<usize>, gbps: Option<f64>, error: Option<&str>) -> Report {
        Report {
            peer,
            gbps,
            error: error.map(String::from),
        }
    }

    #[test]
    fn a_pair_gets_the_lower_of_its_two_figures() {
        let round = [(0, 3), (1, 2)];
        let reports = [
            rep(Some(3), Some(400.0), None),
            rep(Some(2), Some(380.0), None),
            rep(Some(1), Some(390.0), None),
            rep(Some(0), None, None),
        ];
        let f = figures(&round, &reports, &hosts(4)).unwrap();
        assert_eq!(
            f,
            [
                PairResult {
                    a: 0,
                    b: 3,
                    gbps: 400.0
                },
                PairResult {
                    a: 1,
                    b: 2,
                    gbps: 380.0
                }
            ]
        );
    }

    #[test]
    fn failures_name_the_rank_and_its_peer() {
        let round = [(0, 1)];
        let h = hosts(3);
        let e = figures(
            &round,
            &[
                rep(Some(1), Some(1.0), None),
                rep(Some(0), None, Some("nccl timed out")),
                rep(None, None, None),
            ],
            &h,
        )
        .unwrap_err();
        assert_eq!(e, "rank 1 (n2) measuring with rank 0 (n1): nccl timed out");
        let e = figures(
            &round,
            &[
                rep(Some(1), Some(f64::NAN), None),
                rep(Some(0), None, None),
                rep(None, None, None),
            ],
            &h,
        )
        .unwrap_err();
        assert!(e.contains("NaN Gb/s is not a bandwidth"), "{e}");
        let e = figures(
            &round,
            &[
                rep(Some(1), Some(1.0), None),
                rep(Some(0), None, None),
                rep(Some(0), None, None),
            ],
            &h,
        )
        .unwrap_err();
        assert!(e.starts_with("rank 2 (n3) measured with Some(0)"), "{e}");
        let e = figures(
            &round,
            &[
                rep(Some(1), None, None),
                rep(Some(0), None, None),
                rep(None, None, None),
            ],
            &h,
        )
        .unwrap_err();
        assert!(e.contains("no figure from either node"), "{e}");
    }
}
