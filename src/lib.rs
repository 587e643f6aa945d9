//! nodecert: acceptance tests and signed certificates for multi-GPU AI servers.

pub mod training;
