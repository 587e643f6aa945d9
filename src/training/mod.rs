//! The MLP training check: CPU golden reference, CUDA kernel sources, the run as a plan of GPU
//! operations, data-parallel, or tensor-parallel and hybrid ([`partition`]).

pub mod fit;
pub mod kernels;
pub mod partition;
pub mod plan;
pub mod reference;

use reference::{Flaw, MlpConfig};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The golden configuration of a training check.
pub fn golden_config(c: &crate::suite::TrainingCheck) -> MlpConfig {
    MlpConfig {
        layers: c.golden_layers.clone(),
        batch: c.golden_batch,
        steps: c.golden_steps,
        lr: c.golden_lr as f32,
        seed: c.seed,
    }
}

/// Losses of `steps` steps of `cfg` computed on the CPU, with `flaw` injected (Flaw::None for the
/// golden trajectory). Deterministic, so computed once per process for each input.
pub fn cpu_losses(cfg: &MlpConfig, flaw: Flaw) -> Result<Vec<f64>, reference::ConfigError> {
    type Key = (Vec<usize>, usize, usize, u32, u64, String);
    static CACHE: OnceLock<Mutex<HashMap<Key, Vec<f64>>>> = OnceLock::new();
    cfg.validate()?;
    let key = (
        cfg.layers.clone(),
        cfg.batch,
        cfg.steps,
        cfg.lr.to_bits(),
        cfg.seed,
        format!("{flaw:?}"),
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(v);
    }
    let losses: Vec<f64> = reference::train_with(cfg, cfg.steps, flaw)
        .losses
        .into_iter()
        .map(f64::from)
        .collect();
    if let Ok(mut c) = cache.lock() {
        c.insert(key, losses.clone());
    }
    Ok(losses)
}
