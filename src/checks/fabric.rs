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
use crate::backend::{Backend, CollectiveSample};
use crate::error::HwError;
use crate::evidence::{Fact, FactValue, Finding, Metric, Status, Subject};
use crate::fabric::{self, Localised, PairResult, World};
use crate::suite::CollectiveOp;
use crate::suite::FabricCheck;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

pub struct MultiNode(pub FabricCheck);

/// The figure a pair's and the job's all_reduce is: bus bandwidth, at the judged size.
pub const PAIR_METRIC: &str = "pair_busbw";
pub const JOB_METRIC: &str = "job_busbw";
/// The job's all_gather at the judged size.
pub const JOB_ALL_GATHER_METRIC: &str = "job_all_gather_busbw";
/// The smaller sizes of a pair's and of the job's collectives (shown, not judged).
pub const PAIR_SWEEP_METRIC: &str = "pair_sweep_busbw";
pub const JOB_SWEEP_METRIC: &str = "job_sweep_busbw";
/// Data checks: "W of N" elements wrong, for one of this node's pairs or for the job, at an op
/// and size.
const PAIR_DATA: &str = "pair_data";
const JOB_DATA: &str = "job_data";

/// Facts that carry the verdicts into the evidence (each node's, about every node).
const NODE_FAULT: &str = "node_fault";
const LINK_FAULT: &str = "link_fault";
const FABRIC_FAULT: &str = "fabric_fault";
/// The key of the finding that fails a node for a fabric-wide verdict (no node at fault):
/// `fleet drain` takes no node out of service for it alone.
pub const FABRIC_WIDE_FINDING: &str = "fabric_wide";
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
    cfg.pair_busbw_gbps.judging().fail_below
}

impl Check for MultiNode {
    fn id(&self) -> String {
        "fabric".into()
    }
    fn kind(&self) -> &'static str {
        "fabric"
    }
    fn title(&self) -> String {
        "Fabric across nodes (all_reduce between every pair of nodes, then all_reduce and all_gather across all)".into()
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
                "{} of {} nodes ({}): {} pairs in {rounds} rounds, the slow ones again, then all_reduce and all_gather across all; at {}, data checked",
                w.who(w.rank),
                w.size,
                w.job,
                w.size * (w.size - 1) / 2,
                sweep(cfg)
                    .iter()
                    .map(|&b| crate::units::format_bytes(b))
                    .collect::<Vec<_>>()
                    .join(", ")
            )])
        }
    }
}

/// The check on this rank of `world`: rendezvous, pairs, verdicts, the job's all_reduce and
/// all_gather. `names` names each rank's node in the evidence.
pub fn measure_in(
    cfg: &FabricCheck,
    world: &World,
    names: &[String],
    key: &fabric::JobKey,
    ctx: &Ctx,
    backend: &mut dyn Backend,
    progress: Progress,
) -> Result<Measured, HwError> {
    // Whether this node can measure across nodes at all, before anyone waits on it: a node that
    // cannot says so at once (and the others are told why it stops). Rank 0's id is the job's
    // communicator's, handed out by the rendezvous; the others make none now (an id nobody
    // uses leaves NCCL's bootstrap listener waiting).
    let id = match backend.fabric_supported() {
        Err(HwError::NotSupported(why)) => {
            return Ok(not_measured(format!("not available here: {why}")))
        }
        Err(e) => Err(e),
        Ok(()) if world.rank == 0 => backend.fabric_id(),
        Ok(()) => Ok(vec![]),
    };
    let settings = backend.nccl_settings();
    match measure_job(
        cfg, world, names, key, ctx, id, &settings, backend, progress,
    ) {
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

const FABRIC: super::nccl_env::Scope = super::nccl_env::Scope::Fabric;

fn not_measured(why: String) -> Measured {
    let mut m = Measured::default();
    m.facts.push(Fact::new(
        NOT_MEASURED,
        Subject::node(),
        FactValue::Text(why),
    ));
    m
}

/// Warm-up and timed iterations of each collective across nodes (each size, each pair).
pub const WARMUP: u32 = 2;
pub const ITERS: u32 = 10;
/// The collectives of the whole job, in order; all_reduce is the one whose slowest node sets
/// the pace the verdicts name.
pub const JOB_OPS: [CollectiveOp; 2] = [CollectiveOp::AllReduce, CollectiveOp::AllGather];

/// The sizes measured, ascending, the judged one (`size`) last.
pub fn sweep(cfg: &FabricCheck) -> Vec<u64> {
    let mut v: Vec<u64> = cfg
        .sizes
        .iter()
        .map(|s| s.0)
        .filter(|&b| b > 0 && b < cfg.size.0)
        .collect();
    v.sort_unstable();
    v.dedup();
    v.push(cfg.size.0);
    v
}

/// Bus bandwidth of a sample, GB/s: from its median time.
fn busbw(op: CollectiveOp, s: &CollectiveSample) -> f64 {
    let t = crate::evidence::median(&s.time_us);
    super::collective::busbw_gbps(op, s.ranks, s.bytes, t)
}

/// One size of a collective across nodes, as this node measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Point {
    bytes: u64,
    busbw: f64,
    elements_checked: u64,
    wrong_elements: u64,
}

/// What this node measured of one collective of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OpFigures {
    op: CollectiveOp,
    points: Vec<Point>,
}

fn points(op: CollectiveOp, samples: &[CollectiveSample], sizes: &[u64]) -> Vec<Point> {
    samples
        .iter()
        .zip(sizes)
        .map(|(s, &bytes)| Point {
            bytes,
            busbw: busbw(op, s),
            elements_checked: s.elements_checked,
            wrong_elements: s.wrong_elements,
        })
        .collect()
}

/// The pairs measured over the backend: this node's GPUs with the peer's, one communicator per
/// pair, all_reduce at every size; the pair's figure is the judged size's (none, 0, when any
/// size brought wrong data: a wrong answer is no bandwidth).
struct Link<'a> {
    backend: &'a mut dyn Backend,
    /// Each rank's GPU count.
    gpus: &'a [usize],
    me: usize,
    sizes: &'a [u64],
    /// What this node measured with each peer (the last measurement per peer wins).
    measured: Vec<(usize, Vec<Point>)>,
}

impl fabric::PairLink for Link<'_> {
    fn id(&mut self) -> Result<Vec<u8>, String> {
        self.backend.fabric_id().map_err(|e| e.to_string())
    }

    fn measure(&mut self, peer: usize, side: usize, id: &[u8]) -> Result<f64, String> {
        let count = |r: usize| self.gpus.get(r).copied().unwrap_or(0);
        let comm = pair_comm(id, side, count(self.me), count(peer));
        let op = CollectiveOp::AllReduce;
        let got = self
            .backend
            .fabric_collective(&comm, &[op], self.sizes, WARMUP, ITERS)
            .map_err(|e| e.to_string())?;
        let samples = got.first().map(Vec::as_slice).unwrap_or(&[]);
        if samples.len() != self.sizes.len() {
            return Err(format!(
                "{} results for {} sizes",
                samples.len(),
                self.sizes.len()
            ));
        }
        let pts = points(op, samples, self.sizes);
        let wrong = pts.iter().any(|p| p.wrong_elements > 0);
        let figure = pts.last().map_or(0.0, |p| p.busbw);
        self.measured.retain(|(p, _)| *p != peer);
        self.measured.push((peer, pts));
        // The protocol's figures are in Gb/s: bus bandwidth GB/s x 8.
        Ok(if wrong { 0.0 } else { figure * 8.0 })
    }
}

/// The communicator of a pair as this node joins it: the node that made the id (`side` 0)
/// puts its `mine` GPUs first, the other after the first node's `theirs`.
fn pair_comm(id: &[u8], side: usize, mine: usize, theirs: usize) -> crate::backend::FabricComm {
    crate::backend::FabricComm {
        id: id.to_vec(),
        first_rank: if side == 0 { 0 } else { theirs },
        ranks: mine + theirs,
        nodes: 2,
    }
}

/// What rank 0 tells every node about one of the job's collectives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct JobOp {
    op: CollectiveOp,
    /// The job's figure at each size (the slowest node's): (bytes, GB/s).
    by_size: Vec<(u64, f64)>,
    /// The rank whose figure it is at the judged size.
    pace: usize,
}

/// What rank 0 tells every node about the job's collectives, per op of [`JOB_OPS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct JobResult {
    ops: Vec<JobOp>,
}

/// The job's part, once this node's id (or why it has none) is known.
#[allow(clippy::too_many_arguments)]
fn measure_job(
    cfg: &FabricCheck,
    world: &World,
    names: &[String],
    key: &fabric::JobKey,
    ctx: &Ctx,
    id: Result<Vec<u8>, HwError>,
    settings: &[crate::backend::NcclSetting],
    backend: &mut dyn Backend,
    progress: Progress,
) -> Result<Measured, fabric::FabricError> {
    let floor = floor(cfg).unwrap_or(0.0);
    let deadline = Instant::now() + Duration::from_secs_f64(cfg.timeout_s);
    let local = |what: &str, e: &HwError| fabric::FabricError::Local {
        what: what.into(),
        detail: e.to_string(),
    };
    let mut session = if world.rank == 0 {
        let id = id.map_err(|e| local("making the job's NCCL id", &e))?;
        let listener = fabric::rendezvous::listen(world)?;
        fabric::serve(&listener, world, key, &id, deadline)?
    } else {
        let s = fabric::join(world, key, deadline)?;
        if let Err(e) = &id {
            let mut s = s;
            s.abort(&e.to_string());
            return Err(local("making an NCCL id", e));
        }
        s
    };
    progress(1, 4);
    // Every node's GPU count to every node: the ranks of a communicator are its nodes' GPUs.
    let mine = ctx.inventory.gpus.len();
    if mine == 0 {
        let why = "this node has no GPU to put into the fabric".to_string();
        session.abort(&why);
        return Err(fabric::FabricError::Invalid(why));
    }
    let all: Option<Vec<NodeSays>> = session.gather(
        NodeSays {
            gpus: mine,
            nccl_env: told(super::nccl_env::relevant(settings, FABRIC).map(Said::from)),
        },
        deadline,
    )?;
    let job: JobSays = session.broadcast(all.map(|all| job_says(&all)), deadline)?;
    let me = world.rank;
    let name = |r: usize| names.get(r).cloned().unwrap_or_else(|| format!("rank {r}"));
    // The settings other nodes ran with and this one did not: the job's collectives are theirs
    // too. Rank 0 holds the key, but may be faulty: what it tells is checked.
    if let Err(why) = job.check(world.size) {
        session.abort(&why);
        return Err(fabric::FabricError::Invalid(why));
    }
    let counts = job.gpus.clone();
    let others: Vec<(crate::backend::NcclSetting, Vec<usize>)> = job
        .nccl_env
        .iter()
        .map(|(said, ranks)| (said.setting(), ranks))
        // Settings this node ran with are its own; those not told may be others' too.
        .filter(|(s, ranks)| {
            !ranks.contains(&me) || (s.name == super::nccl_env::UNTOLD && ranks.len() > 1)
        })
        .map(|(s, ranks)| (s, ranks.iter().copied().filter(|&r| r != me).collect()))
        .collect();
    let named = |list: &[(crate::backend::NcclSetting, Vec<usize>)]| {
        list.iter()
            .map(|(s, ranks)| (s.clone(), ranks.iter().map(|&r| name(r)).collect()))
            .collect::<Vec<(crate::backend::NcclSetting, Vec<String>)>>()
    };
    let sizes = sweep(cfg);
    let mut link = Link {
        backend,
        gpus: &counts,
        me,
        sizes: &sizes,
        measured: vec![],
    };
    let pairwise = fabric::run_pairwise_over(&mut session, &mut link, floor * 8.0, deadline)?;
    let measured = std::mem::take(&mut link.measured);
    progress(2, 4);
    let pairwise: fabric::flow::Pairwise = session.broadcast(pairwise, deadline)?;
    progress(3, 4);

    // The whole job: every node's GPUs in one communicator, from the rendezvous's id.
    let comm = crate::backend::FabricComm {
        id: session.id().to_vec(),
        first_rank: counts[..me].iter().sum(),
        ranks: counts.iter().sum(),
        nodes: world.size,
    };
    let job: Result<Vec<OpFigures>, String> = backend
        .fabric_collective(&comm, &JOB_OPS, &sizes, WARMUP, ITERS)
        .map_err(|e| e.to_string())
        .and_then(|per_op| {
            if per_op.len() != JOB_OPS.len() || per_op.iter().any(|s| s.len() != sizes.len()) {
                return Err("results of another shape than the ops and sizes asked".into());
            }
            Ok(JOB_OPS
                .iter()
                .zip(&per_op)
                .map(|(&op, samples)| OpFigures {
                    op,
                    points: points(op, samples, &sizes),
                })
                .collect())
        });
    let job = match job {
        Ok(j)
            if j.iter()
                .flat_map(|o| &o.points)
                .all(|p| p.busbw.is_finite() && p.busbw >= 0.0) =>
        {
            j
        }
        Ok(_) => {
            let why = "this node's job figures are not bandwidths".to_string();
            session.abort(&why);
            return Err(fabric::FabricError::Invalid(why));
        }
        Err(e) => {
            session.abort(&e);
            return Err(fabric::FabricError::Local {
                what: "the job's collectives across nodes".into(),
                detail: e,
            });
        }
    };
    let all: Option<Vec<Vec<OpFigures>>> = session.gather(job.clone(), deadline)?;
    let summary = all.map(|all| job_result(&all));
    let summary: JobResult = session.broadcast(summary, deadline)?;
    progress(4, 4);

    let mut m = Measured::default();
    super::nccl_env::record(&mut m, settings, FABRIC, &ctx.suite.nccl.accept);
    super::nccl_env::record_others(&mut m, &named(&others), &ctx.suite.nccl.accept);
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
        m.metrics.push(metric(
            PAIR_METRIC,
            Subject::node_pair(&name(me), &name(peer)),
            p.gbps / 8.0,
        ));
    }
    // The data check of this node's own pair measurements, and the smaller sizes.
    for (peer, pts) in &measured {
        for pt in pts {
            let mut subject = Subject::node_pair(&name(me), &name(*peer));
            subject.op = Some(CollectiveOp::AllReduce);
            subject.bytes = Some(pt.bytes);
            if pt.bytes != cfg.size.0 {
                m.metrics
                    .push(metric(PAIR_SWEEP_METRIC, subject.clone(), pt.busbw));
            }
            m.facts.push(data_fact(PAIR_DATA, subject, pt));
        }
    }
    // The job's figures: the slowest node's at each size; this node's own data check.
    for JobOp { op, by_size, pace } in &summary.ops {
        for &(bytes, v) in by_size {
            let mut subject = Subject::node_named(&name(me));
            subject.op = Some(*op);
            subject.bytes = Some(bytes);
            let metric_name = match (bytes == cfg.size.0, op) {
                (true, CollectiveOp::AllReduce) => JOB_METRIC,
                (true, _) => JOB_ALL_GATHER_METRIC,
                (false, _) => JOB_SWEEP_METRIC,
            };
            m.metrics.push(metric(metric_name, subject, v));
        }
        // The node whose figure sets the job's pace: only it answers for the job's figure.
        let mut subject = Subject::node_named(&name(*pace));
        subject.op = Some(*op);
        m.facts
            .push(Fact::new(PACE, subject, FactValue::Count(*pace as u64)));
    }
    for o in &job {
        for pt in &o.points {
            let mut subject = Subject::node_named(&name(me));
            subject.op = Some(o.op);
            subject.bytes = Some(pt.bytes);
            m.facts.push(data_fact(JOB_DATA, subject, pt));
        }
    }
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
    for v in &pairwise.verdicts {
        m.facts.push(verdict_fact(v, &name));
        // The pairs that make this node's node fault ran its partners' NCCL too.
        if let Localised::Node { node, evidence } = v {
            if *node == me {
                let partners: std::collections::BTreeSet<usize> = evidence
                    .iter()
                    .map(|p| if p.a == me { p.b } else { p.a })
                    .collect();
                let theirs: Vec<(crate::backend::NcclSetting, Vec<usize>)> = others
                    .iter()
                    .map(|(s, ranks)| {
                        let with: Vec<usize> = ranks
                            .iter()
                            .copied()
                            .filter(|r| partners.contains(r))
                            .collect();
                        (s.clone(), with)
                    })
                    .collect();
                super::nccl_env::record_partners(&mut m, &named(&theirs), &ctx.suite.nccl.accept);
            }
        }
    }
    Ok(m)
}

/// The most NCCL settings of one node told to the job, and the most distinct settings the job
/// tells every node: what a node or a job could set is unbounded, a message is not.
const MAX_SETTINGS: usize = 32;

/// An NCCL setting as one node tells it to the others.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Said {
    name: String,
    value: String,
    from: Option<String>,
}

impl From<&crate::backend::NcclSetting> for Said {
    fn from(s: &crate::backend::NcclSetting) -> Self {
        let s = super::nccl_env::bounded(s);
        Said {
            name: s.name,
            value: s.value,
            from: s.from.map(|f| f.to_string_lossy().into_owned()),
        }
    }
}

impl Said {
    /// The setting, bounded (another node said it).
    fn setting(&self) -> crate::backend::NcclSetting {
        super::nccl_env::bounded(&crate::backend::NcclSetting {
            name: self.name.clone(),
            value: self.value.clone(),
            from: self.from.as_ref().map(Into::into),
        })
    }

    /// Where a list was cut: `more` settings are not told, and still steer.
    fn more(more: usize) -> Self {
        Said {
            name: super::nccl_env::UNTOLD.into(),
            value: format!("{more} more settings, not told (at most {MAX_SETTINGS})"),
            from: None,
        }
    }
}

/// `list` to [`MAX_SETTINGS`]: where it is longer, the last place says how many more.
fn told(list: impl Iterator<Item = Said>) -> Vec<Said> {
    let mut v: Vec<Said> = list.collect();
    if v.len() > MAX_SETTINGS {
        let more = v.len() - (MAX_SETTINGS - 1);
        v.truncate(MAX_SETTINGS - 1);
        v.push(Said::more(more));
    }
    v
}

/// What each node tells rank 0 before the pairs: its GPUs, and the NCCL settings it runs with
/// that may steer figures across nodes ([`super::nccl_env::relevant`]), whether its suite
/// accepts them or not (each node judges by its own suite).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeSays {
    gpus: usize,
    nccl_env: Vec<Said>,
}

/// What rank 0 tells every node: the GPUs of each, and each NCCL setting some node runs with,
/// with the ranks that do.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobSays {
    gpus: Vec<usize>,
    nccl_env: Vec<(Said, Vec<usize>)>,
}

impl JobSays {
    /// Whether what rank 0 told holds together for a job of `size` nodes: rank 0 holds the
    /// key, but may be faulty, and nothing it says may vanish or be taken as it comes.
    fn check(&self, size: usize) -> Result<(), String> {
        // Each count goes into rank sums: one past the bound could wrap them.
        let max = crate::suite::MAX_GPUS;
        if self.gpus.len() != size || self.gpus.iter().any(|&g| g == 0 || g > max) {
            return Err(format!(
                "rank 0 told GPU counts {:?} for {size} nodes (each 1 to {max})",
                self.gpus
            ));
        }
        if self.nccl_env.len() > MAX_SETTINGS {
            return Err(format!(
                "rank 0 told {} NCCL settings, at most {MAX_SETTINGS}",
                self.nccl_env.len()
            ));
        }
        match self
            .nccl_env
            .iter()
            .find(|(_, ranks)| ranks.is_empty() || ranks.iter().any(|&r| r >= size))
        {
            Some((s, ranks)) => Err(format!(
                "rank 0 told the NCCL setting {} with ranks {ranks:?} of a job of {size}",
                s.name
            )),
            None => Ok(()),
        }
    }
}

fn job_says(all: &[NodeSays]) -> JobSays {
    let mut settings: std::collections::BTreeMap<Said, Vec<usize>> = Default::default();
    for (rank, node) in all.iter().enumerate() {
        // A node that says more than it may is heard to the bound, the rest as not told.
        for s in told(node.nccl_env.iter().map(|s| Said::from(&s.setting()))) {
            let ranks = settings.entry(s).or_default();
            if ranks.last() != Some(&rank) {
                ranks.push(rank);
            }
        }
    }
    let mut list: Vec<(Said, Vec<usize>)> = settings.into_iter().collect();
    if list.len() > MAX_SETTINGS {
        // The settings past the bound are told as one, with every node that ran with any of
        // them: it steers the job's figures on every node, and on each of those nodes too
        // where another node had one.
        let rest = list.split_off(MAX_SETTINGS - 1);
        let mut ranks: Vec<usize> = rest.iter().flat_map(|(_, r)| r.iter().copied()).collect();
        ranks.sort_unstable();
        ranks.dedup();
        list.push((Said::more(rest.len()), ranks));
    }
    JobSays {
        gpus: all.iter().map(|n| n.gpus).collect(),
        nccl_env: list,
    }
}

/// The job's figure per op and size (the slowest node's) and its pace node, from every node's.
fn job_result(all: &[Vec<OpFigures>]) -> JobResult {
    let ops = JOB_OPS
        .iter()
        .map(|&op| {
            let of =
                |node: &Vec<OpFigures>| node.iter().find(|o| o.op == op).map(|o| o.points.clone());
            let per_node: Vec<Vec<Point>> = all.iter().map(|n| of(n).unwrap_or_default()).collect();
            let sizes: Vec<u64> = per_node
                .first()
                .map(|p| p.iter().map(|x| x.bytes).collect())
                .unwrap_or_default();
            let by_size: Vec<(u64, f64)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    let v = per_node
                        .iter()
                        .map(|p| p.get(i).map_or(0.0, |x| x.busbw))
                        .fold(f64::INFINITY, f64::min);
                    (b, if v.is_finite() { v } else { 0.0 })
                })
                .collect();
            let judged = |p: &Vec<Point>| p.last().map_or(0.0, |x| x.busbw);
            let pace = per_node
                .iter()
                .enumerate()
                .min_by(|a, b| judged(a.1).total_cmp(&judged(b.1)))
                .map_or(0, |(r, _)| r);
            JobOp { op, by_size, pace }
        })
        .collect();
    JobResult { ops }
}

/// A data check as a fact: elements checked and wrong, at an op and size.
fn data_fact(name: &str, subject: Subject, pt: &Point) -> Fact {
    Fact::new(
        name,
        subject,
        FactValue::Elements {
            wrong: pt.wrong_elements,
            checked: pt.elements_checked,
        },
    )
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
    let mut node_fault = Vec::new();
    for f in &m.facts {
        let who = f.subject.describe();
        if f.name == NODE_FAULT && about_me(&f.subject) {
            node_fault.push(out.len());
        }
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
            // No node is at fault, and none reaches the suite's floors across it: the fabric
            // this node was handed over with does not do what the suite promises, so no node
            // of the job passes (a warning alone left every node PASS).
            FABRIC_FAULT => finding(
                Status::Fail,
                f.subject.clone(),
                "fabric-wide",
                "",
                format!(
                    "the fabric as a whole: {}; no node is at fault, and none passes across it",
                    text(f)
                ),
            )
            .on(FABRIC_WIDE_FINDING),
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
    // The data checks: wrong data in one of this node's pairs is named (the verdicts above say
    // which node or link it is: its figure counted as none); wrong data in this node's GPUs
    // after the job's collectives fails it. What was checked and right is said once.
    let data_from = out.len();
    let (mut checked, mut sizes) = (0u64, 0usize);
    for f in &m.facts {
        let (FactValue::Elements { wrong, checked: n }, name) = (&f.value, f.name.as_str()) else {
            continue;
        };
        if name != PAIR_DATA && name != JOB_DATA {
            continue;
        }
        let at = f
            .subject
            .op
            .map(|op| {
                format!(
                    "{op} of {}",
                    f.subject
                        .bytes
                        .map_or(String::new(), crate::units::format_bytes)
                )
            })
            .unwrap_or_default();
        if *wrong == 0 {
            checked += n;
            sizes += 1;
            continue;
        }
        out.push(match name {
            PAIR_DATA => finding(
                Status::Warn,
                f.subject.clone(),
                format!("{wrong} of {n} wrong"),
                "0 wrong",
                format!(
                    "wrong data between {} and {} ({at}): {wrong} of {n} elements; the pair counts as no bandwidth, and the verdicts say which node or link it is",
                    f.subject.node.as_deref().unwrap_or("?"),
                    f.subject.peer_node.as_deref().unwrap_or("?")
                ),
            ),
            _ => finding(
                Status::Fail,
                f.subject.clone(),
                format!("{wrong} of {n} wrong"),
                "0 wrong",
                format!(
                    "wrong data in this node's GPUs after the job's {at}: {wrong} of {n} elements (a NIC, GPUDirect path or GPU that corrupts)"
                ),
            ),
        });
    }
    if sizes > 0 {
        out.push(finding(
            Status::Pass,
            Subject::node_named(&me),
            format!("{checked} elements right"),
            "0 wrong",
            format!("data checked after {sizes} collectives across nodes: {checked} elements, all right"),
        ));
    }
    let data = data_from..out.len();
    // A fabric-wide verdict answers for the job's figures: no single node does.
    let fabric_wide = m.facts.iter().any(|f| f.name == FABRIC_FAULT);
    let pace_of = |op: CollectiveOp| {
        m.facts
            .iter()
            .find(|f| f.name == PACE && f.subject.op.unwrap_or(CollectiveOp::AllReduce) == op)
            .and_then(|f| f.subject.node.clone())
            .filter(|_| !fabric_wide)
    };
    for metric in &m.metrics {
        let op = match metric.name.as_str() {
            JOB_ALL_GATHER_METRIC => CollectiveOp::AllGather,
            _ => CollectiveOp::AllReduce,
        };
        let pace = pace_of(op);
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
            JOB_ALL_GATHER_METRIC => (
                &cfg.all_gather_busbw_gbps,
                pace.as_deref() == Some(me.as_str()),
                "all_gather across every node of the job",
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
                    (JOB_METRIC | JOB_ALL_GATHER_METRIC, Some(p)) => {
                        format!("{}; the job runs at the pace of node {p}", x.reason)
                    }
                    (JOB_METRIC | JOB_ALL_GATHER_METRIC, None) => {
                        format!("{}; the fabric as a whole sets it", x.reason)
                    }
                    _ => format!("{}; see the verdict on which node or link it is", x.reason),
                };
                x.status = Status::Pass;
            }
        }
        out.push(x);
    }
    // Every finding but the data's judges a figure this node's NCCL produced; those of the
    // job's collectives, every node's NCCL.
    let job_figure = |f: &Finding| {
        matches!(
            f.metric.as_deref(),
            Some(JOB_METRIC | JOB_ALL_GATHER_METRIC)
        )
    };
    let (mut fault, mut job, mut own) = (Vec::new(), Vec::new(), Vec::new());
    for (i, f) in out.iter_mut().enumerate() {
        if data.contains(&i) {
            continue;
        }
        if node_fault.contains(&i) {
            fault.push(f);
        } else if job_figure(f) {
            job.push(f);
        } else {
            own.push(f);
        }
    }
    super::nccl_env::steer_fault(m, fault);
    super::nccl_env::steer_job(m, job);
    super::nccl_env::steer(m, own);
    out.extend(super::nccl_env::note(m, "the fabric"));
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
        job_with(size, ranks, faults, cfg(timeout_s))
            .into_iter()
            .map(|(rank, r)| (rank, r.map(|(_, f)| f)))
            .collect()
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
                // Half of 368 GB/s (8 x 400 Gb/s), less latency and noise.
                assert_eq!(fails.len(), 2, "{fails:#?}");
                assert!(fails[0].starts_with("node n3 is below the fabric floor with every node that reaches it (n1 - n3 18"), "{fails:#?}");
                assert!(
                    fails[1].contains("all_reduce across every node of the job 18"),
                    "{fails:#?}"
                );
                assert!(
                    fails[1].ends_with("GB/s is below the floor of 300 GB/s"),
                    "{fails:#?}"
                );
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
            assert!(
                pairs
                    .iter()
                    .all(|x| ["35", "36"].iter().any(|p| x.found.starts_with(p))),
                "{pairs:#?}"
            );
            // The data of every collective was checked, and right.
            assert!(
                f.iter().any(|x| x.status == Status::Pass
                    && x.reason
                        .starts_with("data checked after 4 collectives across nodes: ")),
                "rank {rank}: {f:#?}"
            );
        }
    }

    type Outcome = Result<(Measured, Vec<Finding>), HwError>;

    /// `ranks` of a job of `size` simulated h100 nodes (seed rank + 1, `faults` by rank),
    /// each measured and judged with `c` on its own thread over loopback: what each measured,
    /// and its findings. The world reaches ranks by address; the evidence names the nodes.
    fn job_with(
        size: usize,
        ranks: &[usize],
        faults: &[&[&str]],
        c: FabricCheck,
    ) -> Vec<(usize, Outcome)> {
        job_under(size, ranks, faults, &[], c)
    }

    /// [`job_with`], node i's NCCL running with the settings `nccl[i]`.
    fn job_under(
        size: usize,
        ranks: &[usize],
        faults: &[&[&str]],
        nccl: &[&'static [(&'static str, &'static str)]],
        c: FabricCheck,
    ) -> Vec<(usize, Outcome)> {
        let port = free_port();
        let threads: Vec<_> = ranks
            .iter()
            .map(|&rank| {
                let world = World {
                    rank,
                    size,
                    hosts: vec!["127.0.0.1".into(); size],
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
                let c = c.clone();
                let env = nccl.get(rank).copied().unwrap_or(&[]);
                std::thread::spawn(move || {
                    let mut b =
                        SimBackend::new(sim::load_node("h100-sxm-8").unwrap(), f, rank as u64 + 1)
                            .unwrap()
                            .with_nccl_env(env);
                    let inv = b.inventory().unwrap();
                    let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
                    let ctx = crate::testutil::ctx(&loaded.suite, &inv);
                    let names: Vec<String> = (1..=size).map(|i| format!("n{i}")).collect();
                    let key = fabric::JobKey::new(b"the key of this test's job").unwrap();
                    let r = measure_in(&c, &world, &names, &key, &ctx, &mut b, &mut |_, _| {}).map(
                        |m| {
                            let f = evaluate(&c, &ctx, &m);
                            (m, f)
                        },
                    );
                    (rank, r)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn the_sweep_is_ascending_without_repeats_and_ends_at_the_judged_size() {
        use crate::units::ByteSize;
        let mut c = cfg(1.0);
        assert_eq!(sweep(&c), [1 << 30]);
        c.sizes = vec![
            ByteSize(1 << 30),
            ByteSize(64 << 20),
            ByteSize(0),
            ByteSize(1 << 20),
            ByteSize(64 << 20),
            ByteSize(2 << 30),
        ];
        assert_eq!(sweep(&c), [1 << 20, 64 << 20, 1 << 30]);
    }

    #[test]
    fn the_jobs_figure_is_the_slowest_nodes_per_op_and_size_and_names_its_pace() {
        let pt = |bytes: u64, busbw: f64| Point {
            bytes,
            busbw,
            elements_checked: 1,
            wrong_elements: 0,
        };
        let node = |ar: [f64; 2], ag: [f64; 2]| {
            vec![
                OpFigures {
                    op: CollectiveOp::AllReduce,
                    points: vec![pt(1 << 20, ar[0]), pt(1 << 30, ar[1])],
                },
                OpFigures {
                    op: CollectiveOp::AllGather,
                    points: vec![pt(1 << 20, ag[0]), pt(1 << 30, ag[1])],
                },
            ]
        };
        // Node 1 is slowest at all_reduce's judged size, node 2 at all_gather's; the small
        // size's minimum comes from another node than the judged one's.
        let r = job_result(&[
            node([90.0, 360.0], [50.0, 300.0]),
            node([100.0, 180.0], [60.0, 310.0]),
            node([95.0, 350.0], [70.0, 150.0]),
        ]);
        assert_eq!(
            r.ops,
            [
                JobOp {
                    op: CollectiveOp::AllReduce,
                    by_size: vec![(1 << 20, 90.0), (1 << 30, 180.0)],
                    pace: 1
                },
                JobOp {
                    op: CollectiveOp::AllGather,
                    by_size: vec![(1 << 20, 50.0), (1 << 30, 150.0)],
                    pace: 2
                },
            ]
        );
    }

    #[test]
    fn a_pairs_ranks_put_the_node_that_made_the_id_first() {
        let a = pair_comm(b"id", 0, 8, 4);
        assert_eq!((a.first_rank, a.ranks, a.nodes), (0, 12, 2));
        let b = pair_comm(b"id", 1, 4, 8);
        assert_eq!((b.first_rank, b.ranks, b.nodes), (8, 12, 2));
        assert_eq!(b.id, b"id");
    }

    #[test]
    fn wrong_data_across_the_fabric_fails_the_node_that_gets_it_and_counts_as_no_bandwidth() {
        let out = job_with(3, &[0, 1, 2], &[&[], &["fabric-corrupt"], &[]], cfg(30.0));
        for (rank, r) in out {
            let (_, f) = r.unwrap();
            let fails = failed(&f);
            if rank == 1 {
                // Its pairs are no bandwidth: a node fault, and its own GPUs got wrong data.
                assert!(
                    fails
                        .iter()
                        .any(|x| x.starts_with("node n2 is below the fabric floor")),
                    "{fails:#?}"
                );
                assert!(
                    fails.iter().any(|x| x.starts_with(
                        "wrong data in this node's GPUs after the job's all_reduce of 1 GiB: "
                    )),
                    "{fails:#?}"
                );
                assert!(
                    f.iter().any(|x| x.status == Status::Warn
                        && x.reason
                            .starts_with("wrong data between n2 and n1 (all_reduce of 1 GiB)")),
                    "{f:#?}"
                );
            } else {
                assert!(fails.is_empty(), "rank {rank}: {fails:#?}");
            }
        }
    }

    #[test]
    fn the_sweep_shows_smaller_sizes_and_all_gather_is_judged_on_its_floor() {
        let mut c = cfg(30.0);
        c.sizes = vec![
            crate::units::ByteSize(1 << 20),
            crate::units::ByteSize(64 << 20),
        ];
        c.all_gather_busbw_gbps = Limit {
            fail_below: Some(1000.0),
            ..Default::default()
        };
        let out = job_with(2, &[0, 1], &[], c);
        for (rank, r) in out {
            let (m, f) = r.unwrap();
            let values = |name: &str| -> Vec<(u64, f64)> {
                m.metrics
                    .iter()
                    .filter(|x| x.name == name)
                    .map(|x| (x.subject.bytes.unwrap_or(0), x.median))
                    .collect()
            };
            let pair = values(PAIR_SWEEP_METRIC);
            assert_eq!(
                pair.iter().map(|p| p.0).collect::<Vec<_>>(),
                [1 << 20, 64 << 20]
            );
            // Latency weighs on the small sizes: each below the judged one.
            let judged = values(PAIR_METRIC)[0].1;
            assert!(
                pair[0].1 < pair[1].1 && pair[1].1 < judged,
                "{pair:?} {judged}"
            );
            let job = values(JOB_SWEEP_METRIC);
            assert_eq!(job.len(), 4, "two ops at two smaller sizes: {job:?}");
            assert_eq!(values(JOB_ALL_GATHER_METRIC).len(), 1);
            // all_gather's figure is below its floor of 1000 GB/s, and rank 0 (n1, seed 1) or
            // rank 1 sets its pace: exactly one node fails for it.
            let ag: Vec<&Finding> = f
                .iter()
                .filter(|x| x.metric.as_deref() == Some(JOB_ALL_GATHER_METRIC))
                .collect();
            assert_eq!(ag.len(), 1, "rank {rank}: {ag:#?}");
            assert!(ag[0]
                .reason
                .contains("all_gather across every node of the job"));
            // Nine data checks (pairs: 3 sizes; job: 2 ops x 3 sizes), all right, and the
            // elements they checked added up.
            assert!(
                f.iter()
                    .any(|x| x.reason.starts_with("data checked after 9 collectives")),
                "{f:#?}"
            );
            let total: u64 = m
                .facts
                .iter()
                .filter(|x| x.name == PAIR_DATA || x.name == JOB_DATA)
                .map(|x| match x.value {
                    FactValue::Elements { checked, .. } => checked,
                    _ => 0,
                })
                .sum();
            assert!(total > 1 << 20, "{total}");
            assert!(
                f.iter()
                    .any(|x| x.found == format!("{total} elements right")),
                "{f:#?}"
            );
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
            // Every node fails, for the fabric's reason alone: none is named at fault.
            let fails = failed(&f);
            assert_eq!(fails.len(), 1, "rank {rank}: {fails:#?}");
            assert!(
                fails[0].starts_with("the fabric as a whole")
                    && fails[0].ends_with("no node is at fault, and none passes across it"),
                "rank {rank}: {fails:#?}"
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
            ["rank 0 (n1) of 4 nodes (7): 6 pairs in 3 rounds, the slow ones again, then all_reduce and all_gather across all; at 1 GiB, data checked"]
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
    fn each_collective_of_the_job_is_judged_only_on_its_own_pace_node() {
        let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
        let inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        let ctx = crate::testutil::ctx(&loaded.suite, &inv);
        let mut c = cfg(10.0);
        let floor = Limit {
            fail_below: Some(200.0),
            ..Default::default()
        };
        c.busbw_gbps = floor;
        c.all_gather_busbw_gbps = floor;
        let mut m = Measured::default();
        m.facts.push(Fact::new(
            "rank",
            Subject::node_named("n1"),
            FactValue::Count(0),
        ));
        // all_reduce goes at n2's pace, all_gather at n1's; both figures are below their floor.
        m.facts.push(pace("n2", CollectiveOp::AllReduce));
        m.facts.push(pace("n1", CollectiveOp::AllGather));
        m.metrics
            .push(metric(JOB_METRIC, Subject::node_named("n1"), 100.0));
        m.metrics.push(metric(
            JOB_ALL_GATHER_METRIC,
            Subject::node_named("n1"),
            100.0,
        ));
        let f = evaluate(&c, &ctx, &m);
        let on = |name: &str| {
            f.iter()
                .find(|x| x.metric.as_deref() == Some(name))
                .unwrap()
        };
        let ar = on(JOB_METRIC);
        assert!(ar.info && ar.status == Status::Pass, "{ar:#?}");
        assert!(
            ar.reason.ends_with("the job runs at the pace of node n2"),
            "{ar:#?}"
        );
        let ag = on(JOB_ALL_GATHER_METRIC);
        assert!(!ag.info && ag.status == Status::Fail, "{ag:#?}");
        assert!(
            ag.reason
                .contains("all_gather across every node of the job"),
            "{ag:#?}"
        );
        // No data check was recorded: nothing is said to be right.
        assert!(
            !f.iter().any(|x| x.reason.starts_with("data checked")),
            "{f:#?}"
        );
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
        // A fabric-wide verdict fails every node: none reaches the floors across the fabric.
        let f = facts(vec![Fact::new(
            FABRIC_FAULT,
            Subject::node(),
            text("no pair reaches 300"),
        )]);
        assert!(warns(&f).is_empty(), "{f:#?}");
        let fails: Vec<&str> = f
            .iter()
            .filter(|x| x.status == Status::Fail)
            .map(|x| x.reason.as_str())
            .collect();
        assert_eq!(
            fails,
            [
                "the fabric as a whole: no pair reaches 300; no node is at fault, and none passes \
              across it"
            ]
        );
        // Without its rank the node knows nothing to judge.
        assert!(evaluate(&c, &ctx, &Measured::default()).is_empty());
    }

    /// This node's NCCL ran under `NCCL_IB_DISABLE=1` (sockets, not its NICs): being the slow
    /// node of the job, or the job's figure at its pace, is that setting's doing as much as the
    /// node's, so each is an error naming it; wrong data in its GPUs still fails it.
    #[test]
    fn a_slow_node_under_an_nccl_setting_is_not_judged_but_its_wrong_data_fails() {
        let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
        let inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        let ctx = crate::testutil::ctx(&loaded.suite, &inv);
        let c = cfg(10.0);
        let mut m = slow_n1();
        let statuses = |m: &Measured| -> Vec<Status> {
            evaluate(&c, &ctx, m)
                .iter()
                .filter(|x| !x.info)
                .map(|x| x.status)
                .collect()
        };
        assert_eq!(statuses(&m), [Status::Fail, Status::Fail]);
        crate::checks::nccl_env::record(
            &mut m,
            &[crate::backend::NcclSetting::env("NCCL_IB_DISABLE", "1")],
            crate::checks::nccl_env::Scope::Fabric,
            &Default::default(),
        );
        let f = evaluate(&c, &ctx, &m);
        assert_eq!(statuses(&m), [Status::Error, Status::Error], "{f:#?}");
        assert!(f.iter().filter(|x| x.status == Status::Error).all(|x| x
            .reason
            .contains("not judged: NCCL ran under NCCL_IB_DISABLE=1")));
        assert!(f.iter().any(|x| x.info
            && x.reason
                .starts_with("the fabric measured with NCCL_IB_DISABLE=1")));
        // Wrong data after the job's collective is this node's whatever steered NCCL.
        let mut s = Subject::node_named("n1");
        s.op = Some(CollectiveOp::AllReduce);
        s.bytes = Some(1 << 30);
        m.facts.push(Fact::new(
            JOB_DATA,
            s,
            FactValue::Elements {
                wrong: 2,
                checked: 64,
            },
        ));
        assert_eq!(
            statuses(&m),
            [Status::Error, Status::Fail, Status::Error],
            "{:#?}",
            evaluate(&c, &ctx, &m)
        );
    }

    #[test]
    fn a_setting_one_node_runs_with_is_told_to_every_node_of_the_job() {
        // n3's NIC is slow and its NCCL runs on sockets: the job's figures are its NCCL's too.
        let out = job_under(
            3,
            &[0, 1, 2],
            &[&[], &[], &["nic-downtrained:nic=0"]],
            &[
                &[("NCCL_DEBUG", "INFO")],
                &[("NCCL_ALGO", "Ring")],
                &[("NCCL_IB_DISABLE", "1"), ("NCCL_ALGO", "Ring")],
            ],
            cfg(30.0),
        );
        let mut seen = vec![];
        for (rank, r) in out {
            let (m, f) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            let own = crate::checks::nccl_env::settings(&m);
            let peers = crate::checks::nccl_env::peer_settings(&m);
            let errors: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Error).collect();
            assert!(failed(&f).is_empty(), "rank {rank}: {f:#?}");
            match rank {
                0 => {
                    assert!(own.is_empty());
                    assert_eq!(
                        peers,
                        ["NCCL_ALGO=Ring on n2, n3", "NCCL_IB_DISABLE=1 on n3"]
                    );
                }
                1 => {
                    assert_eq!(own, ["NCCL_ALGO=Ring"]);
                    assert_eq!(peers, ["NCCL_IB_DISABLE=1 on n3"]);
                }
                _ => {
                    assert_eq!(own, ["NCCL_ALGO=Ring", "NCCL_IB_DISABLE=1"]);
                    assert!(peers.is_empty(), "{peers:?}");
                    // Its node fault and the job's figure it sets: not judged, not failed.
                    assert_eq!(errors.len(), 2, "{f:#?}");
                    assert!(errors.iter().all(|x| x
                        .reason
                        .contains("not judged: NCCL ran under NCCL_ALGO=Ring, NCCL_IB_DISABLE=1")));
                }
            }
            let note = f
                .iter()
                .find(|x| x.info && x.metric.as_deref() == Some(crate::checks::nccl_env::FACT))
                .unwrap_or_else(|| panic!("rank {rank}: {f:#?}"));
            assert_eq!(
                note.reason.starts_with("the fabric measured with "),
                !own.is_empty(),
                "{}",
                note.reason
            );
            assert_eq!(
                note.reason.contains(&format!(
                    "the job's collectives ran with {} too: a shortfall of the job's figures is \
                     not judged",
                    peers.join(", ")
                )),
                !peers.is_empty(),
                "{}",
                note.reason
            );
            seen.push(rank);
        }
        seen.sort();
        assert_eq!(seen, [0, 1, 2]);
    }

    #[test]
    fn what_the_job_is_told_of_its_settings_is_bounded_and_by_rank() {
        let said =
            |name: &str, value: &str| Said::from(&crate::backend::NcclSetting::env(name, value));
        let node = |n: usize, extra: &[Said]| NodeSays {
            gpus: 8,
            nccl_env: told(
                (0..n)
                    .map(|i| said(&format!("NCCL_K{i:03}"), "1"))
                    .chain(extra.iter().cloned()),
            ),
        };
        let ring = said("NCCL_ALGO", "Ring");
        // 3 bytes each: the cut backs off from byte 200 to 198, so a second cut would differ.
        let long = "€".repeat(300);
        let says = job_says(&[
            node(0, std::slice::from_ref(&ring)),
            node(0, &[]),
            node(0, &[ring.clone(), said("NCCL_PROTO", &long), ring.clone()]),
        ]);
        assert_eq!(says.gpus, [8, 8, 8]);
        assert_eq!(says.nccl_env.len(), 2);
        assert_eq!(says.nccl_env[0], (ring, vec![0, 2]));
        // Cut once by the node that said it, and not again by rank 0.
        let proto = &says.nccl_env[1].0;
        assert_eq!(proto.value, crate::checks::nccl_env::cut(long.clone()));
        assert_eq!(proto.setting().value, proto.value);
        // A node with as many as the bound tells them all.
        let n = node(MAX_SETTINGS, &[]);
        assert!(n.nccl_env.iter().all(|s| s.name.starts_with("NCCL_K")));
        // A node that has more than the bound says how many more; they still steer.
        let n = node(40, &[]);
        assert_eq!(n.nccl_env.len(), MAX_SETTINGS);
        assert_eq!(
            n.nccl_env[MAX_SETTINGS - 1].name,
            crate::checks::nccl_env::UNTOLD
        );
        assert!(n.nccl_env[MAX_SETTINGS - 1]
            .value
            .starts_with("9 more settings, not told"));
        assert!(crate::checks::nccl_env::steers(
            &n.nccl_env[MAX_SETTINGS - 1].name,
            &n.nccl_env[MAX_SETTINGS - 1].value,
            FABRIC
        ));
        // A job with as many distinct settings as the bound tells them all.
        let mut b = node(0, &[]);
        b.nccl_env = (0..16)
            .map(|i| said(&format!("NCCL_Z{i:03}"), "1"))
            .collect();
        let says = job_says(&[node(16, &[]), b]);
        assert_eq!(says.nccl_env.len(), MAX_SETTINGS);
        assert!(says
            .nccl_env
            .iter()
            .all(|(s, _)| s.name != crate::checks::nccl_env::UNTOLD));
        // A job whose nodes have more distinct settings than the bound tells the rest as one,
        // with every node that had any of them.
        let a = node(20, &[]);
        let mut b = node(0, &[]);
        b.nccl_env = (0..20)
            .map(|i| said(&format!("NCCL_Z{i:03}"), "1"))
            .collect();
        let c = node(0, &[]);
        let says = job_says(&[a, b, c]);
        assert_eq!(says.nccl_env.len(), MAX_SETTINGS);
        let (last, ranks) = &says.nccl_env[MAX_SETTINGS - 1];
        assert_eq!(last.name, crate::checks::nccl_env::UNTOLD);
        assert!(last.value.starts_with("9 more settings"), "{last:?}");
        assert_eq!(ranks, &vec![1]);
        // What a node sent past the bound is heard as not told.
        let mut big = node(0, &[]);
        big.nccl_env = (0..100)
            .map(|i| said(&format!("NCCL_Y{i:03}"), "1"))
            .collect();
        let says = job_says(&[big]);
        assert!(says.nccl_env.iter().all(|(s, _)| s.name != "NCCL_Y050"));
        // ("NCCL_*" sorts first: the job's own bound never drops it.)
        let (first, ranks) = &says.nccl_env[0];
        assert_eq!(first.name, crate::checks::nccl_env::UNTOLD);
        assert!(first.value.starts_with("69 more settings"), "{first:?}");
        assert_eq!(ranks, &vec![0]);
    }

    #[test]
    fn what_rank_0_tells_is_checked_before_it_is_believed() {
        let said = Said::from(&crate::backend::NcclSetting::env("NCCL_ALGO", "Ring"));
        let job = |entries: Vec<(Said, Vec<usize>)>| JobSays {
            gpus: vec![8; 3],
            nccl_env: entries,
        };
        assert!(job(vec![(said.clone(), vec![0, 2])]).check(3).is_ok());
        assert!(job(vec![]).check(3).is_ok());
        let e = job(vec![(said.clone(), vec![3])]).check(3).unwrap_err();
        assert!(e.contains("NCCL_ALGO with ranks [3] of a job of 3"), "{e}");
        assert!(job(vec![(said.clone(), vec![])]).check(3).is_err());
        assert!(job(vec![(said.clone(), vec![0]); MAX_SETTINGS])
            .check(3)
            .is_ok());
        let e = job(vec![(said, vec![0]); MAX_SETTINGS + 1])
            .check(3)
            .unwrap_err();
        assert!(e.contains("33 NCCL settings, at most 32"), "{e}");
        // GPU counts: one per node, each 1 to MAX_GPUS (a sum of them is a rank).
        let counts = |gpus: Vec<usize>| JobSays {
            gpus,
            nccl_env: vec![],
        };
        let max = crate::suite::MAX_GPUS;
        assert!(counts(vec![1, max, 8]).check(3).is_ok());
        for bad in [
            vec![8, 8],
            vec![8; 4],
            vec![8, 0, 8],
            vec![8, max + 1, 8],
            vec![usize::MAX, 1, 1],
        ] {
            let e = counts(bad.clone()).check(3).unwrap_err();
            assert!(e.contains("GPU counts"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn other_nodes_settings_name_at_most_four_nodes_and_keep_their_own_names() {
        let mut m = Measured::default();
        let nodes: Vec<String> = (1..=7).map(|i| format!("n{i}")).collect();
        let env = crate::backend::NcclSetting::env;
        let accept = [("NCCL_TOPO_FILE".to_string(), "/t.xml".to_string())].into();
        crate::checks::nccl_env::record_others(
            &mut m,
            &[
                (env("NCCL_IB_DISABLE", "1"), nodes),
                (env("NCCL_X", "1"), vec![]),
                (env("NCCL_TOPO_FILE", "/t.xml"), vec!["n2".into()]),
            ],
            &accept,
        );
        assert_eq!(
            crate::checks::nccl_env::peer_settings(&m),
            ["NCCL_IB_DISABLE=1 on n1, n2, n3, n4 and 3 more"]
        );
        assert!(crate::checks::nccl_env::settings(&m).is_empty());
        // The setting is the fact's value, the nodes its subject: no condition names a node.
        assert!(m
            .facts
            .iter()
            .any(|f| f.name == crate::checks::nccl_env::PEERS_ACCEPTED
                && f.value == FactValue::Text("NCCL_TOPO_FILE=/t.xml".into())
                && f.subject == Subject::node_named("n2")));
    }

    /// Another node's setting steers the job's figures, which its NCCL ran too, and not this
    /// node's own verdict, which pairs without that node decided.
    #[test]
    fn another_nodes_setting_steers_the_jobs_figure_and_not_this_nodes_fault() {
        let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
        let inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        let ctx = crate::testutil::ctx(&loaded.suite, &inv);
        let c = cfg(10.0);
        let mut m = slow_n1();
        crate::checks::nccl_env::record_others(
            &mut m,
            &[(
                crate::backend::NcclSetting::env("NCCL_IB_DISABLE", "1"),
                vec!["n4".into()],
            )],
            &Default::default(),
        );
        let f = evaluate(&c, &ctx, &m);
        let judged: Vec<(Status, Option<&str>)> = f
            .iter()
            .filter(|x| !x.info)
            .map(|x| (x.status, x.metric.as_deref()))
            .collect();
        assert_eq!(
            judged,
            [(Status::Fail, None), (Status::Error, Some(JOB_METRIC))],
            "{f:#?}"
        );
        assert!(f[1]
            .reason
            .contains("not judged: NCCL ran under NCCL_IB_DISABLE=1 on n4"));
        // A setting of the partners whose pairs make the node fault steers the verdict too.
        let mut with_partner = m.clone();
        crate::checks::nccl_env::record_partners(
            &mut with_partner,
            &[(
                crate::backend::NcclSetting::env("NCCL_IB_SL", "3"),
                vec!["n2".into(), "n3".into()],
            )],
            &Default::default(),
        );
        let f = evaluate(&c, &ctx, &with_partner);
        let fault = f.iter().find(|x| !x.info).unwrap();
        assert_eq!(fault.status, Status::Error, "{f:#?}");
        assert!(fault
            .reason
            .contains("not judged: NCCL ran under NCCL_IB_SL=3 on n2, n3"));
        // Without the other nodes' settings, both fail: the runner re-judges so to decide a miss.
        let plain = crate::checks::nccl_env::without_settings(&with_partner);
        assert!(evaluate(&c, &ctx, &plain)
            .iter()
            .filter(|x| !x.info)
            .all(|x| x.status == Status::Fail));
    }

    /// End to end: n3's NIC is slow and n1 and n2 run `NCCL_ALGO=Ring`, n3 and n4 not. The
    /// pairs that make n3's node fault ran n1's and n2's NCCL, so n3's verdict is not judged;
    /// n4, whose own verdicts no pair of theirs decides, is judged as before.
    #[test]
    fn a_node_fault_found_with_partners_under_a_setting_is_not_judged() {
        let out = job_under(
            4,
            &[0, 1, 2, 3],
            &[&[], &[], &["nic-downtrained:nic=0"], &[]],
            &[&[("NCCL_ALGO", "Ring")], &[("NCCL_ALGO", "Ring")], &[], &[]],
            cfg(30.0),
        );
        for (rank, r) in out {
            let (m, f) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            assert!(failed(&f).is_empty(), "rank {rank}: {f:#?}");
            if rank == 2 {
                assert_eq!(
                    crate::checks::nccl_env::partner_settings(&m),
                    ["NCCL_ALGO=Ring on n1, n2"]
                );
                let errors: Vec<&str> = f
                    .iter()
                    .filter(|x| x.status == Status::Error)
                    .map(|x| x.reason.as_str())
                    .collect();
                assert_eq!(errors.len(), 2, "{errors:#?}");
                assert!(errors[0].starts_with("node n3 is below the fabric floor"));
                assert!(errors
                    .iter()
                    .all(|e| e.contains("not judged: NCCL ran under NCCL_ALGO=Ring on n1, n2")));
            } else {
                assert!(crate::checks::nccl_env::partner_settings(&m).is_empty());
            }
        }
    }

    /// What rank 0, node n1, measured as the slow node of its job: a node fault, and the job's
    /// all_reduce at its pace.
    fn slow_n1() -> Measured {
        let mut m = Measured::default();
        m.facts.push(Fact::new(
            "rank",
            Subject::node_named("n1"),
            FactValue::Count(0),
        ));
        m.facts.push(Fact::new(
            NODE_FAULT,
            Subject::node_named("n1"),
            FactValue::Text("n1 - n2 20 GB/s, n1 - n3 21 GB/s".into()),
        ));
        m.facts.push(pace("n1", CollectiveOp::AllReduce));
        m.metrics
            .push(metric(JOB_METRIC, Subject::node_named("n1"), 20.0));
        m
    }

    fn pace(node: &str, op: CollectiveOp) -> Fact {
        let mut s = Subject::node_named(node);
        s.op = Some(op);
        Fact::new(PACE, s, FactValue::Count(0))
    }
}
