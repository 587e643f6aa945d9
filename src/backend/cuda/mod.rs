//! Real measurements through cudarc.

pub mod libs;
