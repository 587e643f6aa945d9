//! nodecert: acceptance tests and signed certificates for multi-GPU AI servers.
//!
//! The flow, one way: suite (TOML) -> [`suite::load`] -> [`checks`] planned against the node ->
//! measured on a [`backend::Backend`] (real GPUs or a simulated node) -> evaluated into
//! [`evidence::Evidence`] -> rendered by [`report`] and exported (JUnit, Prometheus) by
//! [`export`].

// Printing goes through `stdio` (`out!`, `outln!`, `errln!`): the std macros panic on a full disk.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod backend;
pub mod checks;
pub mod cli;
pub mod commands;
pub mod config;
pub mod console;
pub mod diff;
pub mod error;
pub mod evidence;
pub mod export;
pub mod fabric;
pub mod fleet;
pub mod fsio;
pub mod inventory;
pub mod inventory_text;
pub mod network;
pub mod platform;
pub mod process;
pub mod report;
pub mod runner;
pub mod sign;
pub mod stdio;
pub mod suite;
#[cfg(test)]
pub(crate) mod testutil;
pub mod training;
pub mod units;
