//! The data-parallel MLP training check: CPU golden reference and CUDA kernel sources.

pub mod kernels;
pub mod reference;
