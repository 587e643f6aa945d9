//! The scale-out fabric across the nodes of one job: one nodecert per node (Slurm, a Kubernetes
//! Indexed Job), joined through [`crate::fabric`]'s rendezvous; every pair of nodes measured in
//! rounds, the slow pairs' nodes again with nodes that reached the floor, and the verdict (a
//! node, a link, the whole fabric) shared with every node, so that each node's evidence says
//! what was found about it: a node fault fails that node (and a fleet drains it), a link or
//! fabric suspect warns the nodes concerned (a fleet flags them to investigate). Then the job's
//! all_reduce across every node, judged against its floor.
//!
//! The simulated node's figure comes from its NICs ([`crate::backend::sim_nic::node_busbw`]);
//! on real GPUs the figure would be an NCCL all_reduce between the two nodes over the id the
//! rendezvous delivers, which this nodecert does not make yet: there the check is not available.

use super::judge::{finding, fmt_num};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Fact, FactValue, Finding, Metric, Status, Subject};
use crate::fabric::{self, Localised, PairResult, World};
use crate::suite::FabricCheck;
use std::time::{Duration, Instant};

pub struct MultiNode(pub FabricCheck);

/// The figure a pair's and the job's all_reduce is: bus bandwidth.
pub const PAIR_METRIC: &str = "pair_busbw";
pub const JOB_METRIC: &str = "job_busbw";

/// Facts that carry the verdicts into the evidence (each node's, about every node).
const NODE_FAULT: &str = "node_fault";
const LINK_FAULT: &str = "link_fault";
const FABRIC_FAULT: &str = "fabric_fault";
const UNDECIDED: &str = "undecided";
const PACE: &str = "pace";
/// Why the fabric was not measured on this node, when another node (or the platform) is the
/// reason: not a fault of this node.
const NOT_MEASURED: &str = "not_measured";

/// This process's world from the environment, and the ranks' node names: rank 0's address may
/// be given apart (`NODECERT_FABRIC_ROOT`) where the scheduler's node names do not resolve
/// (several slurmd on one machine); the evidence still names the nodes.
fn world_from_env() -> Result<Option<(World, Vec<String>)>, String> {
    let env = |k: &str| std::env::var(k).ok();
    let Some(mut w) = World::from_env(&env)? else {
        return Ok(None);
    };
    let names = w.hosts.clone();
    if let Some(root) = env("NODECERT_FABRIC_ROOT").filter(|r| !r.trim().is_empty()) {
        w.hosts[0] = root.trim().to_string();
    }
    Ok(Some((w, names)))
}

fn floor(cfg: &FabricCheck) -> Option<f64> {
    cfg.pair_busbw_gbps.fail_below
}

impl Check for MultiNode {
    fn id(&self) -> String {
        "fabric".into()
    }
    fn kind(&self) -> &'static str {
        "fabric"
    }
    fn title(&self) -> String {
        "Fabric across nodes (all_reduce between every pair of nodes, then all)".into()
    }

    fn plan(&self, _ctx: &Ctx) -> Result<Vec<String>, String> {
        let plan = plan_for(&self.0, world_from_env())?;
        // Without the job's key this node could not prove it belongs to the job.
        fabric::JobKey::from_env(&|k| std::env::var(k).ok())
            .map_err(|e| format!("not measured: {e}"))?;
        Ok(plan)
    }

    fn measure(
        &self,
        ctx: &Ctx,
        backend: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let (world, names) = world_from_env()
            .map_err(HwError::NotSupported)?
            .ok_or_else(|| HwError::NotSupported("not part of a multi-node job".into()))?;
        let key = match fabric::JobKey::from_env(&|k| std::env::var(k).ok()) {
            Ok(k) => k,
            Err(e) => return Ok(not_measured(format!("not measured: {e}"))),
        };
        measure_in(&self.0, &world, &names, &key, ctx, backend, progress)
    }

    fn samples(&self, _gpus: usize) -> (u64, String) {
        (0, String::new())
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        evaluate(&self.0, ctx, m)
    }

    /// The fabric is asked for by name (`--fabric`, or enabled in the suite): a fabric not
    /// measured, for whatever reason, is a promise not kept.
    fn skip_is_unkept(&self) -> bool {
        true
    }
}

/// What the check will do for this process's `world` (from the environment), or why it cannot
/// run here.
pub fn plan_for(
    cfg: &FabricCheck,
    world: Result<Option<(World, Vec<String>)>, String>,
) -> Result<Vec<String>, String> {
    if floor(cfg).is_none() {
        return Err(
            "the suite sets no pair_busbw_gbps.fail_below: nothing to judge pairs of nodes by"
                .into(),
        );
    }
    match world {
        Err(e) => Err(format!("not available here: {e}")),
        Ok(None) => Err("not part of a multi-node job (run it under `nodecert fleet slurm --fabric` or an Indexed Job)".into()),
        Ok(Some((w, _))) if w.size < 2 => Err("a job of one node: no pair to measure".into()),
        Ok(Some((w, _))) if w.size > fabric::flow::MAX_PAIRWISE => Err(format!(
            "a job of {} nodes: pair by pair, at most {} (split the fleet into jobs)",
            w.size,
            fabric::flow::MAX_PAIRWISE
        )),
        Ok(Some((w, _))) => {
            // The circle method: n-1 rounds for an even count, n for an odd one.
            let rounds = if w.size % 2 == 0 { w.size - 1 } else { w.size };
            Ok(vec![format!(
                "{} of {} nodes ({}): {} pairs in {rounds} rounds, the slow ones again, then all_reduce across all",
                w.who(w.rank),
                w.size,
                w.job,
                w.size * (w.size - 1) / 2
            )])
        }
    }
}

/// The check on this rank of `world`: rendezvous, pairs, verdicts, the job's all_reduce.
/// `names` names each rank's node in the evidence.
pub fn measure_in(
    cfg: &FabricCheck,
    world: &World,
    names: &[String],
    key: &fabric::JobKey,
    ctx: &Ctx,
    backend: &mut dyn Backend,
    progress: Progress,
) -> Result<Measured, HwError> {
    // What this node drives into the fabric, before anyone waits on it: a node that cannot
    // measure says so at once (and the others are told why it stops).
    let mine = backend.fabric_busbw(&ctx.inventory.gpus, cfg.size.0);
    if let Err(HwError::NotSupported(why)) = &mine {
        return Ok(not_measured(format!("not available here: {why}")));
    }
    match measure_job(cfg, world, names, key, ctx, mine, progress) {
        Ok(m) => Ok(m),
        // Another node's absence or stop, rank 0 giving up on the job because others never
        // came, or someone on rank 0's port who could not prove the job's key: this node could
        // not be measured, and is not at fault (the missing node is, in its own evidence or by
        // leaving none; a stranger or a key mix-up is for a person to look into).
        Err(
            e @ (fabric::FabricError::Missing { .. }
            | fabric::FabricError::Aborted { .. }
            | fabric::FabricError::NoRoot { .. }
            | fabric::FabricError::Untrusted { .. }
            | fabric::FabricError::Refused { gave_up: true, .. }),
        ) => Ok(not_measured(format!("not measured: {e}"))),
        Err(e) => Err(e.into()),
    }
}

fn not_measured(why: String) -> Measured {
    let mut m = Measured::default();
    m.facts.push(Fact::new(
        NOT_MEASURED,
        Subject::node(),
        FactValue::Text(why),
    ));
    m
}

/// The job's part, once this node's own figure is known (or its error, to tell the others).
fn measure_job(
    cfg: &FabricCheck,
    world: &World,
    names: &[String],
    key: &fabric::JobKey,
    ctx: &Ctx,
    mine: Result<f64, HwError>,
    progress: Progress,
) -> Result<Measured, fabric::FabricError> {
    let _ = ctx;
    let floor = floor(cfg).unwrap_or(0.0);
    let deadline = Instant::now() + Duration::from_secs_f64(cfg.timeout_s);
    let mut session = if world.rank == 0 {
        let listener = fabric::rendezvous::listen(world)?;
        // NCCL's unique id is 128 opaque bytes (ncclGetUniqueId on real GPUs); here one of the
        // job, the time and the process, so that no two runs share one.
        let id: Vec<u8> = (0u8..4)
            .flat_map(|i| {
                use sha2::Digest;
                let mut h = sha2::Sha256::new();
                h.update(world.job.as_bytes());
                h.update(format!(
                    "{:?} {} {i}",
                    std::time::SystemTime::now(),
                    std::process::id()
                ));
                h.finalize().to_vec()
            })
            .collect();
        fabric::serve(&listener, world, key, &id, deadline)?
    } else {
        fabric::join(world, key, deadline)?
    };
    let mine = match mine {
        Ok(v) if v.is_finite() && v >= 0.0 => v,
        Ok(v) => {
            let why = format!("this node's fabric figure is {v}, not a bandwidth");
            session.abort(&why);
            return Err(fabric::FabricError::Invalid(why));
        }
        Err(e) => {
            session.abort(&e.to_string());
            return Err(fabric::FabricError::Local {
                what: "measuring this node's fabric".into(),
                detail: e.to_string(),
            });
        }
    };
    progress(1, 3);
    // Every node's figure to every node: a pair's figure is the lower of its two nodes'.
    let all: Option<Vec<f64>> = session.gather(mine, deadline)?;
    let table: Vec<f64> = session.broadcast(all, deadline)?;
    if table.len() != world.size {
        return Err(fabric::FabricError::Invalid(format!(
            "{} figures for {} nodes",
            table.len(),
            world.size
        )));
    }
    let me = world.rank;
    // The helper's figures are in Gb/s: bus bandwidth GB/s x 8.
    let mut measure = |peer: usize| -> Result<f64, String> {
        table
            .get(peer)
            .map(|p| mine.min(*p) * 8.0)
            .ok_or_else(|| format!("no figure for rank {peer}"))
    };
    let pairwise =
        fabric::flow::run_pairwise_figures(&mut session, &mut measure, floor * 8.0, deadline)?;
    progress(2, 3);
    let pairwise: fabric::flow::Pairwise = session.broadcast(pairwise, deadline)?;
    // The job's all_reduce: a ring across every node runs at its slowest node's pace.
    let job = table.iter().copied().fold(f64::INFINITY, f64::min);
    let pace = table.iter().position(|v| *v == job).unwrap_or(0);
    progress(3, 3);

    let name = |r: usize| names.get(r).cloned().unwrap_or_else(|| format!("rank {r}"));
    let mut m = Measured::default();
    // This node's pairs (the second pass's figure where it measured one again).
    let mut pairs: Vec<&PairResult> = pairwise
        .second
        .iter()
        .chain(&pairwise.first)
        .filter(|p| p.a == me || p.b == me)
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    pairs.retain(|p| seen.insert((p.a.min(p.b), p.a.max(p.b))));
    pairs.sort_by_key(|p| if p.a == me { p.b } else { p.a });
    for p in pairs {
        let peer = if p.a == me { p.b } else { p.a };
        let v = p.gbps / 8.0;
        m.metrics.push(metric(
            PAIR_METRIC,
            Subject::node_pair(&name(me), &name(peer)),
            v,
        ));
    }
    m.metrics
        .push(metric(JOB_METRIC, Subject::node_named(&name(me)), job));
    m.facts.push(Fact::new(
        "ranks",
        Subject::node(),
        FactValue::Count(world.size as u64),
    ));
    m.facts.push(Fact::new(
        "rank",
        Subject::node_named(&name(me)),
        FactValue::Count(me as u64),
    ));
    // The node whose figure sets the job's pace: only it answers for the job's figure.
    m.facts.push(Fact::new(
        PACE,
        Subject::node_named(&name(pace)),
        FactValue::Count(pace as u64),
    ));
    for v in &pairwise.verdicts {
        m.facts.push(verdict_fact(v, &name));
    }
    Ok(m)
}

fn metric(name: &str, subject: Subject, v: f64) -> Metric {
    Metric {
        name: name.into(),
        subject,
        unit: "GB/s".into(),
        median: v,
        min: v,
        max: v,
        samples: vec![v],
        timing: None,
        convention: None,
    }
}

/// A verdict as a fact of the evidence: who, and in words what the figures say.
fn verdict_fact(v: &Localised, name: &dyn Fn(usize) -> String) -> Fact {
    let figures = |e: &[PairResult]| {
        e.iter()
            .map(|p| {
                format!(
                    "{} - {} {} GB/s",
                    name(p.a),
                    name(p.b),
                    fmt_num(p.gbps / 8.0)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match v {
        Localised::Node { node, evidence } => Fact::new(
            NODE_FAULT,
            Subject::node_named(&name(*node)),
            FactValue::Text(figures(evidence)),
        ),
        Localised::Link { a, b, evidence } => Fact::new(
            LINK_FAULT,
            Subject::node_pair(&name(*a), &name(*b)),
            FactValue::Text(figures(evidence)),
        ),
        Localised::Undecided { node, why } => Fact::new(
            UNDECIDED,
            Subject::node_named(&name(*node)),
            FactValue::Text(why.clone()),
        ),
        Localised::Fabric { groups, why, .. } => {
            let named: Vec<String> = groups
                .iter()
                .map(|g| g.iter().map(|r| name(*r)).collect::<Vec<_>>().join(" "))
                .collect();
            let text = if named.is_empty() {
                why.clone()
            } else {
                format!("{why} (groups: {})", named.join(" | "))
            };
            Fact::new(FABRIC_FAULT, Subject::node(), FactValue::Text(text))
        }
    }
}

fn text(f: &Fact) -> &str {
    match &f.value {
        FactValue::Text(t) => t,
        _ => "",
    }
}

/// This node's findings: the verdicts about it (a node fault fails it; a link, an undecided
/// node or the whole fabric warns), its pairs against the floor, the job's all_reduce.
pub fn evaluate(cfg: &FabricCheck, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
    let _ = ctx;
    let mut out = Vec::new();
    if let Some(f) = m.facts.iter().find(|f| f.name == NOT_MEASURED) {
        out.push(finding(
            Status::Skip,
            Subject::node(),
            "not measured",
            "",
            text(f).to_string(),
        ));
        return out;
    }
    let me = m
        .facts
        .iter()
        .find(|f| f.name == "rank")
        .and_then(|f| f.subject.node.clone());
    let Some(me) = me else {
        return out;
    };
    let floor = floor(cfg).unwrap_or(0.0);
    let about_me = |s: &Subject| {
        s.node.as_deref() == Some(me.as_str()) || s.peer_node.as_deref() == Some(me.as_str())
    };
    for f in &m.facts {
        let who = f.subject.describe();
        let x = match f.name.as_str() {
            NODE_FAULT if about_me(&f.subject) => finding(
                Status::Fail,
                f.subject.clone(),
                "slow with every reference node",
                format!(">= {} GB/s with some", fmt_num(floor)),
                format!(
                    "{who} is below the fabric floor with every node that reaches it ({}): a node fault (its NICs, cables or PCIe paths)",
                    text(f)
                ),
            ),
            LINK_FAULT if about_me(&f.subject) => finding(
                Status::Warn,
                f.subject.clone(),
                "slow pair",
                format!(">= {} GB/s", fmt_num(floor)),
                format!(
                    "link {who} is below the fabric floor while each node reaches it with others ({}): the cable, switch port or route between them",
                    text(f)
                ),
            ),
            UNDECIDED if about_me(&f.subject) => finding(
                Status::Warn,
                f.subject.clone(),
                "undecided",
                "",
                format!("{who} is in a slow pair, but the figures cannot say whether it is at fault: {}", text(f)),
            ),
            FABRIC_FAULT => finding(
                Status::Warn,
                f.subject.clone(),
                "fabric-wide",
                "",
                format!("the fabric as a whole: {}", text(f)),
            ),
            NODE_FAULT => {
                let mut x = finding(
                    Status::Pass,
                    f.subject.clone(),
                    "another node's fault",
                    "",
                    format!("{who} is the slow node of this job ({})", text(f)),
                );
                x.info = true;
                x
            }
            _ => continue,
        };
        out.push(x);
    }
    // A fabric-wide verdict answers for the job's figure: no single node does.
    let fabric_wide = m.facts.iter().any(|f| f.name == FABRIC_FAULT);
    let pace = m
        .facts
        .iter()
        .find(|f| f.name == PACE)
        .and_then(|f| f.subject.node.clone())
        .filter(|_| !fabric_wide);
    for metric in &m.metrics {
        let (limit, judged, what) = match metric.name.as_str() {
            // A pair's figure is its slower node's: a pair at the floor shows that both of its
            // nodes reach it; one below is shown, not judged against either node (the verdicts
            // above say which node, or link, it is).
            PAIR_METRIC => (
                &cfg.pair_busbw_gbps,
                true,
                "all_reduce between the two nodes",
            ),
            // The job's figure is its slowest node's: that node answers for it.
            JOB_METRIC => (
                &cfg.busbw_gbps,
                pace.as_deref() == Some(me.as_str()),
                "all_reduce across every node of the job",
            ),
            _ => continue,
        };
        let Some(mut x) =
            super::judge::judge(&metric.subject, what, metric.median, &metric.unit, limit)
        else {
            continue;
        };
        x = x.on(&metric.name);
        let judged = judged && (metric.name != PAIR_METRIC || x.status == Status::Pass);
        if !judged {
            x.info = true;
            if x.status != Status::Pass {
                x.reason = match (metric.name.as_str(), &pace) {
                    (JOB_METRIC, Some(p)) => {
                        format!("{}; the job runs at the pace of node {p}", x.reason)
                    }
                    (JOB_METRIC, None) => format!("{}; the fabric as a whole sets it", x.reason),
                    _ => format!("{}; see the verdict on which node or link it is", x.reason),
                };
                x.status = Status::Pass;
            }
        }
        out.push(x);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::{self, Fault, SimBackend};
    use crate::suite::Limit;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn cfg(timeout_s: f64) -> FabricCheck {
        FabricCheck {
            pair_busbw_gbps: Limit {
                fail_below: Some(300.0),
                ..Default::default()
            },
            busbw_gbps: Limit {
                fail_below: Some(300.0),
                ..Default::default()
            },
            timeout_s,
            ..Default::default()
        }
    }

    /// Run the check on `ranks` of a job of `size` simulated h100 nodes n1..n{size} over
    /// loopback, node i with `faults[i]`: each rank's result and findings.
    fn job(
        size: usize,
        ranks: &[usize],
        faults: &[&[&str]],
        timeout_s: f64,
    ) -> Vec<(usize, Result<Vec<Finding>, HwError>)> {
        let port = free_port();
        let hosts: Vec<String> = vec!["127.0.0.1".into(); size];
        let threads: Vec<_> = ranks
            .iter()
            .map(|&rank| {
                let world = World {
                    rank,
                    size,
                    hosts: hosts.clone(),
                    job: "t".into(),
                    port,
                };
                let f: Vec<Fault> = faults
                    .get(rank)
                    .copied()
                    .unwrap_or(&[])
                    .iter()
                    .map(|s| Fault::parse(s).unwrap())
                    .collect();
                std::thread::spawn(move || {
                    let node = sim::load_node("h100-sxm-8").unwrap();
                    let mut b = SimBackend::new(node, f, rank as u64 + 1).unwrap();
                    let inv = b.inventory().unwrap();
                    let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
                    let ctx = crate::testutil::ctx(&loaded.suite, &inv);
                    let c = cfg(timeout_s);
                    // The world reaches ranks by address; the evidence names the nodes.
                    let names: Vec<String> = (1..=size).map(|i| format!("n{i}")).collect();
                    let key = fabric::JobKey::new(b"the key of this test's job").unwrap();
                    let r = measure_in(&c, &world, &names, &key, &ctx, &mut b, &mut |_, _| {})
                        .map(|m| evaluate(&c, &ctx, &m));
                    (rank, r)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn failed(f: &[Finding]) -> Vec<&str> {
        f.iter()
            .filter(|x| x.status == Status::Fail)
            .map(|x| x.reason.as_str())
            .collect()
    }

    #[test]
    fn four_simulated_nodes_name_the_one_with_a_slow_nic() {
        let out = job(
            4,
            &[0, 1, 2, 3],
            &[&[], &[], &["nic-downtrained:nic=0"], &[]],
            30.0,
        );
        for (rank, r) in &out {
            let f = r.as_ref().unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            let fails = failed(f);
            if *rank == 2 {
                assert_eq!(fails.len(), 2, "{fails:#?}");
                assert!(fails[0].starts_with("node n3 is below the fabric floor with every node that reaches it (n1 - n3 184 GB/s"), "{fails:#?}");
                assert!(fails[0].contains("184 GB/s"), "{fails:#?}");
                assert!(fails[1].contains("all_reduce across every node of the job 184 GB/s is below the floor of 300 GB/s"), "{fails:#?}");
            } else {
                assert!(fails.is_empty(), "rank {rank}: {fails:#?}");
                assert!(f
                    .iter()
                    .any(|x| x.info && x.reason.contains("is the slow node of this job")));
                assert!(f
                    .iter()
                    .any(|x| x.reason.contains("the job runs at the pace of node n3")));
            }
        }
    }

    #[test]
    fn a_healthy_job_passes_every_pair() {
        let out = job(3, &[0, 1, 2], &[], 30.0);
        for (rank, r) in out {
            let f = r.unwrap();
            assert!(failed(&f).is_empty(), "rank {rank}: {f:#?}");
            // Two pairs each, and the job: 368 GB/s from 8 x 400 Gb/s.
            let pairs: Vec<&Finding> = f
                .iter()
                .filter(|x| x.metric.as_deref() == Some(PAIR_METRIC))
                .collect();
            assert_eq!(pairs.len(), 2);
            assert!(pairs.iter().all(|x| x.found == "368 GB/s"), "{pairs:#?}");
        }
    }

    #[test]
    fn a_node_that_never_arrives_is_named_within_the_deadline_and_the_others_are_not_blamed() {
        let t0 = Instant::now();
        let out = job(3, &[0, 1], &[], 2.0);
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        for (rank, r) in &out {
            let f = r.as_ref().unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!(f[0].status, Status::Skip, "rank {rank}");
            assert!(
                f[0].reason.starts_with("not measured: ")
                    && f[0]
                        .reason
                        .contains("rank 2 (127.0.0.1) did not arrive within 2 s"),
                "rank {rank}: {}",
                f[0].reason
            );
        }
    }

    #[test]
    fn a_job_slow_everywhere_is_the_fabrics_verdict_and_no_node_answers_for_it() {
        let all: &[&str] = &["nic-downtrained:nic=0"];
        let out = job(3, &[0, 1, 2], &[all, all, all], 30.0);
        for (rank, r) in out {
            let f = r.unwrap();
            assert!(failed(&f).is_empty(), "rank {rank}: {:#?}", failed(&f));
            assert!(
                f.iter()
                    .any(|x| x.status == Status::Warn
                        && x.reason.starts_with("the fabric as a whole")),
                "rank {rank}: {f:#?}"
            );
            assert!(f
                .iter()
                .any(|x| x.reason.ends_with("the fabric as a whole sets it")));
        }
    }

    #[test]
    fn the_plan_says_how_many_pairs_and_rounds_or_why_not() {
        let world = |size: usize| {
            Ok(Some((
                World {
                    rank: 0,
                    size,
                    hosts: (1..=size).map(|i| format!("n{i}")).collect(),
                    job: "7".into(),
                    port: 29501,
                },
                vec![],
            )))
        };
        let c = cfg(10.0);
        assert_eq!(
            plan_for(&c, world(4)).unwrap(),
            ["rank 0 (n1) of 4 nodes (7): 6 pairs in 3 rounds, the slow ones again, then all_reduce across all"]
        );
        assert!(plan_for(&c, world(5)).unwrap()[0].contains(": 10 pairs in 5 rounds"));
        assert!(plan_for(&c, world(2)).unwrap()[0].contains(": 1 pairs in 1 rounds"));
        assert_eq!(
            plan_for(&c, world(1)).unwrap_err(),
            "a job of one node: no pair to measure"
        );
        assert!(plan_for(&c, world(1024)).is_ok());
        assert!(plan_for(&c, world(1025))
            .unwrap_err()
            .starts_with("a job of 1025 nodes"));
        assert!(plan_for(&c, Ok(None))
            .unwrap_err()
            .starts_with("not part of a multi-node job"));
        assert_eq!(
            plan_for(&c, Err("SLURM_NTASKS is not a number".into())).unwrap_err(),
            "not available here: SLURM_NTASKS is not a number"
        );
        let none = FabricCheck::default();
        assert!(plan_for(&none, world(4))
            .unwrap_err()
            .contains("no pair_busbw_gbps"));
        let check = MultiNode(c);
        assert_eq!((check.id().as_str(), check.kind()), ("fabric", "fabric"));
        assert!(check.title().starts_with("Fabric across nodes"));
        assert_eq!(check.samples(8), (0, String::new()));
    }

    #[test]
    fn a_node_turned_away_for_its_own_reason_is_an_error_not_a_skip() {
        let port = free_port();
        let run = |rank: usize, size: usize, key: &'static str| {
            std::thread::spawn(move || {
                let world = World {
                    rank,
                    size,
                    hosts: vec!["127.0.0.1".into(); size],
                    job: "t".into(),
                    port,
                };
                let names: Vec<String> = (1..=size).map(|i| format!("n{i}")).collect();
                let mut b =
                    SimBackend::new(sim::load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap();
                let inv = b.inventory().unwrap();
                let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
                let ctx = crate::testutil::ctx(&loaded.suite, &inv);
                let key = fabric::JobKey::new(key.as_bytes()).unwrap();
                measure_in(
                    &cfg(2.0),
                    &world,
                    &names,
                    &key,
                    &ctx,
                    &mut b,
                    &mut |_, _| {},
                )
                .map(|m| evaluate(&cfg(2.0), &ctx, &m))
            })
        };
        let key = "the key of this test's job";
        let r0 = run(0, 2, key);
        // Rank 1 believes in a job of 3: rank 0 refuses it, for its own mistake.
        let r1 = run(1, 3, key);
        let e = r1.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("refused"), "{e}");
        // Rank 0 waited for a rank 1 that never came right: not measured, not blamed.
        let f = r0.join().unwrap().unwrap();
        assert_eq!(f[0].status, Status::Skip, "{f:#?}");
    }

    #[test]
    fn a_rank_0_without_the_nodes_key_leaves_the_node_not_measured_not_blamed() {
        let port = free_port();
        let run = |rank: usize, key: &'static str| {
            std::thread::spawn(move || {
                let world = World {
                    rank,
                    size: 2,
                    hosts: vec!["127.0.0.1".into(); 2],
                    job: "t".into(),
                    port,
                };
                let names = vec!["n1".to_string(), "n2".to_string()];
                let mut b =
                    SimBackend::new(sim::load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap();
                let inv = b.inventory().unwrap();
                let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
                let ctx = crate::testutil::ctx(&loaded.suite, &inv);
                let key = fabric::JobKey::new(key.as_bytes()).unwrap();
                measure_in(
                    &cfg(1.0),
                    &world,
                    &names,
                    &key,
                    &ctx,
                    &mut b,
                    &mut |_, _| {},
                )
                .map(|m| evaluate(&cfg(1.0), &ctx, &m))
            })
        };
        let r0 = run(0, "rank 0 was given this key");
        let r1 = run(1, "and rank 1 another one");
        for (who, r) in [("rank 0", r0), ("rank 1", r1)] {
            let f = r.join().unwrap().unwrap();
            assert_eq!(f.len(), 1, "{who}: {f:#?}");
            assert_eq!(f[0].status, Status::Skip, "{who}: {f:#?}");
            assert!(f[0].reason.starts_with("not measured: "), "{who}: {f:#?}");
        }
    }

    #[test]
    fn a_node_is_told_only_the_verdicts_about_it_and_the_fabrics() {
        let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
        let inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        let ctx = crate::testutil::ctx(&loaded.suite, &inv);
        let c = cfg(10.0);
        let facts = |extra: Vec<Fact>| {
            let mut m = Measured::default();
            m.facts.push(Fact::new(
                "rank",
                Subject::node_named("n1"),
                FactValue::Count(0),
            ));
            m.facts.extend(extra);
            evaluate(&c, &ctx, &m)
        };
        let text = |t: &str| FactValue::Text(t.into());
        let warns = |f: &[Finding]| -> Vec<String> {
            f.iter()
                .filter(|x| x.status == Status::Warn)
                .map(|x| x.reason.clone())
                .collect()
        };
        // A link between two other nodes, a node another one cannot place: not n1's.
        let f = facts(vec![
            Fact::new(
                LINK_FAULT,
                Subject::node_pair("n2", "n3"),
                text("n2 - n3 100 GB/s"),
            ),
            Fact::new(UNDECIDED, Subject::node_named("n4"), text("two nodes only")),
        ]);
        assert!(warns(&f).is_empty(), "{f:#?}");
        // The same about n1: warned, named.
        let f = facts(vec![
            Fact::new(
                LINK_FAULT,
                Subject::node_pair("n1", "n3"),
                text("n1 - n3 100 GB/s"),
            ),
            Fact::new(UNDECIDED, Subject::node_named("n1"), text("two nodes only")),
        ]);
        let w = warns(&f);
        assert_eq!(w.len(), 2, "{f:#?}");
        assert!(w[0].starts_with(
            "link n1 - n3 is below the fabric floor while each node reaches it with others"
        ));
        assert!(w[1].starts_with("node n1 is in a slow pair, but the figures cannot say whether it is at fault: two nodes only"));
        // A fabric-wide verdict warns every node.
        let f = facts(vec![Fact::new(
            FABRIC_FAULT,
            Subject::node(),
            text("no pair reaches 300"),
        )]);
        assert_eq!(warns(&f), ["the fabric as a whole: no pair reaches 300"]);
        // Without its rank the node knows nothing to judge.
        assert!(evaluate(&c, &ctx, &Measured::default()).is_empty());
    }
}
