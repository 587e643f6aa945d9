//! The scale-out fabric: NCCL across nodes, and finding the slow node or the slow link.
//!
//! One nodecert runs on each node of a scheduler job (Slurm or a Kubernetes Indexed Job). This
//! module is the control protocol between them, and it needs no GPU:
//! - [`world`]: who am I (rank, world size, the host of each rank, the job, a job-scoped port);
//! - [`key`]: the job's key, which every rank proves it holds before it is let in;
//! - [`rendezvous`]: rank 0 creates the NCCL unique id and serves it to every rank over TCP,
//!   then keeps the connections as a control channel ([`rendezvous::Session`]: gather and
//!   broadcast of JSON values, every wait bounded by a deadline);
//! - [`pairwise`]: all node pairs in rounds (the circle method), no node twice in a round;
//! - [`localise`]: from pair figures, a node fault, a link fault, a fabric-wide problem, or
//!   "cannot tell, and why";
//! - [`flow`]: the whole per-rank flow, [`flow::run_pairwise`], with the measurement given as a
//!   function of the peer's rank.
//!
//! On real GPUs each pair is an NCCL communicator of both nodes' GPUs, made from an id the pair's
//! lower node makes and the protocol hands to both ([`flow::PairLink`]), and the job's is made
//! from the id the rendezvous delivers; `ncclCommInitRank` and the collectives run under the
//! backend's deadlines. That path has not yet run on a multi-node cluster; everything else here
//! runs and is tested on loopback with modelled figures.

pub mod flow;
pub mod key;
pub mod localise;
pub mod pairwise;
pub mod rendezvous;
pub mod world;

pub use flow::{run_pairwise, run_pairwise_figures, run_pairwise_over, PairLink, Pairwise};
pub use key::JobKey;
pub use localise::{Localised, PairResult};
pub use rendezvous::{join, serve, Session};
pub use world::{job_port, World};

/// What went wrong between the ranks. Each message names the ranks (and hosts) at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FabricError {
    /// Ranks that did not arrive (rendezvous) or did not answer (gather) before the deadline.
    #[error("{} did not {doing} within {} s", list_ranks(.missing), secs(*.seconds))]
    Missing {
        /// The ranks that were waited for, with their hosts.
        missing: Vec<(usize, String)>,
        /// What they did not do: "arrive", "answer".
        doing: String,
        /// How long they were waited for, in seconds.
        seconds: f64,
    },
    /// Rank 0 never answered a joining rank.
    #[error("rank 0 at {host}:{port} did not answer within {} s ({last})", secs(*.seconds))]
    NoRoot {
        /// Rank 0's host.
        host: String,
        /// Rank 0's port.
        port: u16,
        /// How long it was waited for, in seconds.
        seconds: f64,
        /// The last failure seen (connection refused, name not found, ...).
        last: String,
    },
    /// The other side refused us (another job, a duplicate rank, ...).
    #[error("{by} refused this rank: {why}")]
    Refused {
        /// Who refused ("rank 0 at n1:29731").
        by: String,
        /// Its reason.
        why: String,
        /// True when rank 0, having proven it holds the job's key, gave up on the whole job
        /// (other ranks never arrived): not this rank's fault.
        gave_up: bool,
    },
    /// A rank stopped the run and said why (its measurement failed, a peer dropped).
    #[error("{by} stopped the run: {why}")]
    Aborted {
        /// The rank that stopped it, with its host.
        by: String,
        /// Its reason.
        why: String,
    },
    /// Whoever answered on rank 0's port did not prove it holds the job's key: nothing it said
    /// is believed (a stranger, another job, or nodes given different keys).
    #[error("{who}: not trusted: {detail}")]
    Untrusted {
        /// Who answered ("rank 0 at n1:29731").
        who: String,
        /// What it did.
        detail: String,
    },
    /// A peer dropped, timed out mid-message, or sent something that is not the protocol.
    #[error("{who}: {detail}")]
    Peer {
        /// The rank, with its host.
        who: String,
        /// What happened.
        detail: String,
    },
    /// A local failure: listening, accepting, or a value that cannot be sent.
    #[error("{what}: {detail}")]
    Local {
        /// What was being done.
        what: String,
        /// What failed.
        detail: String,
    },
    /// Inputs that cannot work: an inconsistent world, an id too large, a figure not a number.
    #[error("{0}")]
    Invalid(String),
}

/// Seconds for people: whole seconds from 1 s up, one decimal below ("0.4").
pub(crate) fn secs(s: f64) -> String {
    let tenths = (s * 10.0).round() / 10.0;
    if tenths >= 1.0 {
        format!("{s:.0}")
    } else {
        format!("{tenths:.1}")
    }
}

/// "ranks 2 (n3), 3 (n4)" or "rank 2 (n3)".
fn list_ranks(ranks: &[(usize, String)]) -> String {
    let items: Vec<String> = ranks.iter().map(|(r, h)| format!("{r} ({h})")).collect();
    match items.len() {
        1 => format!("rank {}", items[0]),
        _ => format!("ranks {}", items.join(", ")),
    }
}

impl From<FabricError> for crate::error::HwError {
    fn from(e: FabricError) -> Self {
        match e {
            FabricError::Missing { seconds, .. } | FabricError::NoRoot { seconds, .. } => {
                crate::error::HwError::Call {
                    call: format!("fabric rendezvous (waited {} s)", secs(seconds)),
                    detail: e.to_string(),
                }
            }
            _ => crate::error::HwError::Call {
                call: "fabric control channel".into(),
                detail: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_ranks() {
        let e = FabricError::Missing {
            missing: vec![(2, "n3".into()), (3, "n4".into())],
            doing: "arrive".into(),
            seconds: 30.0,
        };
        assert_eq!(
            e.to_string(),
            "ranks 2 (n3), 3 (n4) did not arrive within 30 s"
        );
        let e = FabricError::Missing {
            missing: vec![(1, "n2".into())],
            doing: "answer".into(),
            seconds: 2.4,
        };
        assert_eq!(e.to_string(), "rank 1 (n2) did not answer within 2 s");
        let e = FabricError::NoRoot {
            host: "n1".into(),
            port: 29731,
            seconds: 30.0,
            last: "connection refused".into(),
        };
        assert_eq!(
            e.to_string(),
            "rank 0 at n1:29731 did not answer within 30 s (connection refused)"
        );
        let hw: crate::error::HwError = e.into();
        assert_eq!(secs(0.44), "0.4");
        assert_eq!(secs(1.999), "2");
        assert_eq!(secs(0.9999), "1");
        assert_eq!(secs(30.2), "30");
        assert!(hw.to_string().contains("rank 0 at n1:29731"));
    }
}
