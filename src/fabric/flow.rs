//! The whole pair-wise fabric test on one rank: measure every node pair in rounds, gather the
//! figures on rank 0, measure the suspects again with passing nodes, and judge.
//!
//! The measurement is a [`PairLink`]: before each round, the lower rank of every pair makes a
//! unique id ([`PairLink::id`]: `ncclGetUniqueId` on real GPUs) and rank 0 hands it to both
//! nodes of the pair ([`Session::scatter`]); then both measure over it together
//! ([`PairLink::measure`]: on real GPUs an NCCL all_reduce between the two nodes' GPUs over
//! InfiniBand or RoCE). Each side reports a digest of the id it used, and rank 0 checks that
//! both used the same. The same flow runs with modelled figures (tests, `--simulate`).
//! `measure` must keep its own deadline (the flow checks the overall one between rounds, it
//! cannot interrupt a measurement).

use super::localise::{judge, passing, second_pass, suspects, Localised, PairResult};
use super::pairwise::{peer_in, rounds};
use super::rendezvous::Session;
use super::FabricError;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The most nodes one pair-wise test takes: n(n-1)/2 pairs in n-1 rounds (1024 nodes: 523,776
/// pairs, 1023 rounds). A larger fleet is split into groups first.
pub const MAX_PAIRWISE: usize = 1024;

/// What a pair-wise test asks of each node.
pub trait PairLink {
    /// A new id for the communicator of a pair this node starts (it is the pair's lower rank).
    fn id(&mut self) -> Result<Vec<u8>, String>;
    /// This node's figure with `peer`, in Gb/s, over the communicator `id` names; `side` is 0
    /// on the node that made the id, 1 on the other.
    fn measure(&mut self, peer: usize, side: usize, id: &[u8]) -> Result<f64, String>;
}

/// A [`PairLink`] from a figure per peer (modelled figures): its ids are the rank's number,
/// exchanged like real ones.
struct Figures<'a> {
    rank: usize,
    measure: &'a mut dyn FnMut(usize) -> Result<f64, String>,
}

impl PairLink for Figures<'_> {
    fn id(&mut self) -> Result<Vec<u8>, String> {
        Ok((self.rank as u64).to_be_bytes().to_vec())
    }
    fn measure(&mut self, peer: usize, _side: usize, _id: &[u8]) -> Result<f64, String> {
        (self.measure)(peer)
    }
}

/// A short digest of an id, to check that both nodes of a pair used the same.
fn digest(id: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(id)[..8])
}

/// What one rank offers before a round: the id of its pair, if it starts one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Offer {
    /// The id, in hex, when this rank is the lower of its pair and made one.
    id: Option<String>,
    /// Why it could not make one, when it could not.
    error: Option<String>,
}

/// What one rank measured in one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Report {
    /// The peer this rank measured with; `None` when it sat the round out.
    peer: Option<usize>,
    /// The figure, in Gb/s, when the measurement worked.
    gbps: Option<f64>,
    /// Why the measurement failed, when it did.
    error: Option<String>,
    /// A digest of the id it measured over ([`digest`]).
    #[serde(default)]
    id: Option<String>,
}

/// Each rank's id for `round` from every rank's offer (index = rank): both nodes of a pair get
/// the lower one's; a rank that sits the round out gets none. An error names the rank that
/// could not make its pair's id.
fn pair_ids(
    round: &[(usize, usize)],
    offers: &[Offer],
    hosts: &[String],
) -> Result<Vec<Option<String>>, String> {
    let who = |r: usize| super::world::who(hosts, r);
    let mut ids = vec![None; offers.len()];
    for &(a, b) in round {
        let (lo, hi) = (a.min(b), a.max(b));
        let offer = offers
            .get(lo)
            .ok_or_else(|| format!("no offer from rank {lo}"))?;
        if let Some(e) = &offer.error {
            return Err(format!(
                "{} could not start its pair with {}: {e}",
                who(lo),
                who(hi)
            ));
        }
        let id = offer
            .id
            .clone()
            .ok_or_else(|| format!("{} made no id for its pair with {}", who(lo), who(hi)))?;
        if hi >= ids.len() {
            return Err(format!("no offer from rank {hi}"));
        }
        ids[lo] = Some(id.clone());
        ids[hi] = Some(id);
    }
    Ok(ids)
}

/// Run `schedule` (rounds of pairs, the same on every rank): in each round this rank measures
/// with its peer, if it has one; rank 0 gathers every rank's report after each round (so the
/// pairs of a round run together) and gets the figure of each pair, the lower of what its two
/// nodes saw. Rank 0 then lets every rank on to the next round. A failed measurement or a
/// figure that is not a bandwidth stops the run on every rank, naming the rank and its peer.
fn measure_rounds(
    session: &mut Session,
    schedule: &[Vec<(usize, usize)>],
    link: &mut dyn PairLink,
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
        // The pair's id: made by its lower rank, handed by rank 0 to both.
        let offer = match peer {
            Some(p) if me < p => match link.id() {
                Ok(id) => Offer {
                    id: Some(hex::encode(id)),
                    error: None,
                },
                Err(e) => Offer {
                    id: None,
                    error: Some(e),
                },
            },
            _ => Offer {
                id: None,
                error: None,
            },
        };
        let ids = match session.gather(offer, deadline)? {
            Some(all) => match pair_ids(round, &all, session.hosts()) {
                Ok(ids) => Some(ids),
                Err(why) => {
                    session.abort(&why);
                    return Err(FabricError::Invalid(why));
                }
            },
            None => None,
        };
        let id: Option<String> = session.scatter(ids, deadline)?;
        let id = match id.as_deref().map(hex::decode) {
            Some(Ok(id)) => Some(id),
            Some(Err(_)) => {
                let why = "rank 0 handed out an id that is not hex".to_string();
                session.abort(&why);
                return Err(FabricError::Invalid(why));
            }
            None => None,
        };
        let report = match (peer, &id) {
            (None, _) => Report {
                peer: None,
                gbps: None,
                error: None,
                id: None,
            },
            (Some(p), None) => Report {
                peer: Some(p),
                gbps: None,
                error: Some("was handed no id for its pair".into()),
                id: None,
            },
            (Some(p), Some(id)) => {
                let side = usize::from(me > p);
                let (gbps, error) = match link.measure(p, side, id) {
                    // Checked here: JSON has no NaN or infinity (they would arrive as "no
                    // figure").
                    Ok(g) if !g.is_finite() || g < 0.0 => {
                        (None, Some(format!("measured {g} Gb/s, not a bandwidth")))
                    }
                    Ok(g) => (Some(g), None),
                    Err(e) => (None, Some(e)),
                };
                Report {
                    peer: Some(p),
                    gbps,
                    error,
                    id: Some(digest(id)),
                }
            }
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
        if let Some(p) = rep.peer {
            let theirs = reports.get(p).and_then(|x| x.id.as_ref());
            if rep.id.is_some() && theirs.is_some() && rep.id.as_ref() != theirs {
                return Err(format!(
                    "{} and {} measured over different ids: the pair's id went astray",
                    who(r),
                    who(p)
                ));
            }
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
    let rank = session.rank();
    run_pairwise_over(session, &mut Figures { rank, measure }, floor, deadline)
}

/// [`run_pairwise_figures`] over a [`PairLink`]: each pair measured over an id its lower node
/// made.
pub fn run_pairwise_over(
    session: &mut Session,
    link: &mut dyn PairLink,
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
    let first = measure_rounds(session, &rounds(n), link, deadline)?;
    let plan = (session.rank() == 0).then(|| {
        let sus = suspects(&first, floor);
        Plan {
            second: second_pass(&sus, &passing(&first, floor, n), n),
        }
    });
    let plan: Plan = session.broadcast(plan, deadline)?;
    let second = measure_rounds(session, &plan.second, link, deadline)?;
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
            id: None,
        }
    }

    #[test]
    fn both_nodes_of_a_pair_get_the_lower_ones_id_and_a_missing_one_is_named() {
        let offer = |id: Option<&str>, error: Option<&str>| Offer {
            id: id.map(String::from),
            error: error.map(String::from),
        };
        let h = hosts(5);
        let round = [(3, 0), (1, 2)];
        let offers = [
            offer(Some("aa"), None),
            offer(Some("bb"), None),
            offer(None, None),
            offer(None, None),
            offer(None, None),
        ];
        assert_eq!(
            pair_ids(&round, &offers, &h).unwrap(),
            [
                Some("aa".into()),
                Some("bb".into()),
                Some("bb".into()),
                Some("aa".into()),
                None
            ]
        );
        let mut bad = offers.clone();
        bad[1] = offer(None, Some("NCCL not found"));
        assert_eq!(
            pair_ids(&round, &bad, &h).unwrap_err(),
            "rank 1 (n2) could not start its pair with rank 2 (n3): NCCL not found"
        );
        bad[1] = offer(None, None);
        assert_eq!(
            pair_ids(&round, &bad, &h).unwrap_err(),
            "rank 1 (n2) made no id for its pair with rank 2 (n3)"
        );
    }

    #[test]
    fn a_pair_whose_nodes_used_different_ids_is_an_error() {
        let round = [(0, 1)];
        let mut a = rep(Some(1), Some(1.0), None);
        let mut b = rep(Some(0), Some(1.0), None);
        a.id = Some(digest(b"one"));
        b.id = Some(digest(b"one"));
        assert!(figures(&round, &[a.clone(), b.clone()], &hosts(2)).is_ok());
        b.id = Some(digest(b"two"));
        let e = figures(&round, &[a, b], &hosts(2)).unwrap_err();
        assert!(e.contains("measured over different ids"), "{e}");
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
