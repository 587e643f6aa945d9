//! The scale-out fabric: NCCL across nodes, and finding the slow node or the slow link.
//!
//! One nodecert runs on each node of a scheduler job (Slurm or a Kubernetes Indexed Job). This
//! module is the control protocol between them, and it needs no GPU:
//! - [`world`]: who am I (rank, world size, the host of each rank, the job, a job-scoped port);
//! - [`rendezvous`]: rank 0 creates the NCCL unique id and serves it to every rank over TCP,
//!   then keeps the connections as a control channel ([`rendezvous::Session`]: gather and
//!   broadcast of JSON values, every wait bounded by a deadline);
//! - [`pairwise`]: all node pairs in rounds (the circle method), no node twice in a round;
//! - [`localise`]: from pair figures, a node fault, a link fault, a fabric-wide problem, or
//!   "cannot tell, and why";
//! - [`flow`]: the whole per-rank flow, [`flow::run_pairwise`], with the measurement given as a
//!   function of the peer's rank.
//!
//! What waits for a real multi-node cluster: the `measure` of real GPUs, an NCCL send/recv
//! between the two nodes of a pair over InfiniBand or RoCE (a communicator made from the id
//! this rendezvous delivers, `ncclCommInitRank` under our deadline). Everything else here runs
//! and is tested on loopback with modelled figures.

pub mod localise;
pub mod pairwise;
pub mod world;

pub use localise::{Localised, PairResult};
pub use world::{job_port, World};
